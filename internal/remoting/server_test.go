package remoting

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
)

// startServer runs a remoting server over a fresh broker on loopback.
func startServer(t testing.TB) string { return startServerWith(t, Options{MaxFrameBytes: 1 << 20}) }

// startServerWith runs a remoting server with opts.
func startServerWith(t testing.TB, opts Options) string {
	t.Helper()
	dir := t.TempDir()
	c := storage.DefaultConfig(filepath.Join(dir, "data"))
	c.SegmentSize, c.MaxRecordSize, c.MinFreeBytes, c.MinFreeRatio = 8<<20, 1<<20, 0, 0
	e, err := storage.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(context.Background(), e, m, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := NewServer(b, opts)
	go func() { _ = s.Serve(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done; b.Close(); m.Close(); e.Close() })
	return l.Addr().String()
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc
}

func readCommand(t testing.TB, nc net.Conn) *protocol.Command {
	t.Helper()
	var n [4]byte
	if _, err := io.ReadFull(nc, n[:]); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, protocol.FrameLength(n))
	if _, err := io.ReadFull(nc, frame); err != nil {
		t.Fatal(err)
	}
	c, err := protocol.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestUnsupportedCodes: a code with no handler is answered
// REQUEST_CODE_NOT_SUPPORTED with a remark and the request's opaque, in
// either header type; one-way requests get nothing back.
func TestUnsupportedCodes(t *testing.T) {
	nc := dial(t, startServer(t))
	oneway := &protocol.Command{Code: 9999, Language: "GO", Opaque: 1, Flag: protocol.FlagOneway}
	_, _ = nc.Write(protocol.AppendFrame(nil, oneway))
	req := &protocol.Command{Code: 9998, Language: "JAVA", Opaque: 77, ExtFields: map[string]string{"a": "b"}}
	_, _ = nc.Write(protocol.AppendBinaryFrame(nil, req))
	resp := readCommand(t, nc)
	if !resp.IsResponse() || resp.Opaque != 77 || resp.Code != protocol.RequestCodeNotSupported || resp.Remark == "" {
		t.Fatalf("%+v", resp)
	}
}

// TestBadFramesCloseTheConnection: oversize, undersize and malformed frames
// close the connection; the server keeps serving others.
func TestBadFramesCloseTheConnection(t *testing.T) {
	addr := startServer(t)
	for name, frame := range map[string][]byte{
		"oversize":       binary.BigEndian.AppendUint32(nil, 2<<20),
		"negative":       binary.BigEndian.AppendUint32(nil, 0x80000000),
		"undersize":      binary.BigEndian.AppendUint32(nil, 2),
		"header overrun": append(binary.BigEndian.AppendUint32(nil, 8), 0, 0, 0, 200, 0, 0, 0, 0),
		"bad json":       append(binary.BigEndian.AppendUint32(nil, 7), 0, 0, 0, 3, '{', '{', '{'),
		"bad type":       append(binary.BigEndian.AppendUint32(nil, 4), 9, 0, 0, 0),
	} {
		nc := dial(t, addr)
		_, _ = nc.Write(frame)
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Fatalf("%s: connection left open", name)
		}
	}
	nc := dial(t, addr)
	_, _ = nc.Write(protocol.AppendFrame(nil, &protocol.Command{Code: 1234, Opaque: 5}))
	if resp := readCommand(t, nc); resp.Opaque != 5 {
		t.Fatalf("%+v", resp)
	}
}

// TestSlowAndIdleConnectionsClosed: a connection that sends nothing, and
// one that announces a frame and trickles it, are closed at their
// deadlines (a frame gets a second more per MiB it announces; what a
// half-sent frame costs in memory is what arrived: task.ReadFrame).
func TestSlowAndIdleConnectionsClosed(t *testing.T) {
	addr := startServerWith(t, Options{MaxFrameBytes: 64 << 20, IdleTimeout: 300 * time.Millisecond, FrameTimeout: 300 * time.Millisecond})
	closed := func(nc net.Conn, what string) {
		t.Helper()
		var b [1]byte
		if _, err := nc.Read(b[:]); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: read %v, want the connection closed", what, err)
		}
	}
	closed(dial(t, addr), "idle")
	slow := dial(t, addr)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1000) // announces 1000 bytes, sends a byte every 100 ms
	if _, err := slow.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := slow.Write([]byte{0}); err != nil {
					return
				}
			}
		}
	}()
	closed(slow, "trickling")
}

// TestRequestBytesBudget: a frame is read only once its announced size fits
// in the request byte budget: while a slow connection holds most of it, a
// large request on another connection waits, and runs once the slow one
// goes away.
func TestRequestBytesBudget(t *testing.T) {
	addr := startServerWith(t, Options{MaxFrameBytes: 1 << 20, Budget: task.NewByteBudget(1 << 20)})
	slow := dial(t, addr)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 900<<10) // announces 900 KiB, sends 10 bytes
	if _, err := slow.Write(append(hdr[:], make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}
	big := dial(t, addr)
	frame := protocol.AppendFrame(nil, &protocol.Command{Code: 1234, Opaque: 9, Body: make([]byte, 900<<10)})
	if _, err := big.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = big.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var b [1]byte
	if _, err := big.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a request beyond the budget was answered: %v", err)
	}
	slow.Close()
	_ = big.SetReadDeadline(time.Now().Add(10 * time.Second))
	if r := readCommand(t, big); r.Opaque != 9 {
		t.Fatalf("answer %+v", r)
	}
}
