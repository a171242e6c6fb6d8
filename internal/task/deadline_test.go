package task

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
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
