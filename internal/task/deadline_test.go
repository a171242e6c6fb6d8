package task

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
	"time"
)

// TestReadFrame: a frame arriving in small pieces is read whole; one cut
// short is an error; memory grows with what arrives, not with what was
// announced.
func TestReadFrame(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 30_000)
	got, err := ReadFrame(iotest.OneByteReader(bytes.NewReader(data[:1000])), 1000)
	if err != nil || !bytes.Equal(got, data[:1000]) {
		t.Fatalf("small frame: %v", err)
	}
	got, err = ReadFrame(iotest.HalfReader(bytes.NewReader(data)), len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("large frame: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(data[:100]), 64<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut short: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _ = ReadFrame(bytes.NewReader(data[:100]), 64<<20)
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("%d bytes allocated for an announced 64 MiB frame of 100 bytes", n)
	}
}

// TestReadFrameHoldsWhatArrived: a peer that sends exactly a buffer's
// worth of an announced frame and stops holds that buffer of the budget,
// not the next, larger one.
func TestReadFrameHoldsWhatArrived(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	budget := NewByteBudget(64 << 20)
	done := make(chan struct{})
	read := make(chan error, 1)
	go func() {
		_, err := ReadFrameWithin(bufio.NewReaderSize(pr, 64<<10), 64<<20, budget, done, FrameBuffers{})
		read <- err
	}()
	if _, err := pw.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the reader waits for more
	if held := 64<<20 - budget.Available(); held != 64<<10 {
		t.Fatalf("holding %d bytes of the budget after 64 KiB arrived", held)
	}
	pw.CloseWithError(io.ErrClosedPipe)
	if err := <-read; err == nil {
		t.Fatal("a frame cut short was read")
	}
	if budget.Available() != 64<<20 {
		t.Fatalf("budget not returned: %d", budget.Available())
	}
}
