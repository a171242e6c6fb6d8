package remoting

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
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

// createTopic creates a topic of queues queues over nc.
func createTopic(t testing.TB, nc net.Conn, name string, queues int) {
	t.Helper()
	create := &protocol.Command{Code: protocol.UpdateAndCreateTopic, ExtFields: protocol.Pairs("topic", name, "writeQueueNums", strconv.Itoa(queues))}
	if _, err := nc.Write(protocol.AppendFrame(nil, create)); err != nil {
		t.Fatal(err)
	}
	if r := readCommand(t, nc); r.Code != protocol.Success {
		t.Fatalf("create topic %s: %d %s", name, r.Code, r.Remark)
	}
}

// TestUnsupportedCodes: a code with no handler is answered
// REQUEST_CODE_NOT_SUPPORTED with a remark and the request's opaque, in
// either header type; one-way requests get nothing back.
func TestUnsupportedCodes(t *testing.T) {
	nc := dial(t, startServer(t))
	oneway := &protocol.Command{Code: 9999, Language: "GO", Opaque: 1, Flag: protocol.FlagOneway}
	_, _ = nc.Write(protocol.AppendFrame(nil, oneway))
	req := &protocol.Command{Code: 9998, Language: "JAVA", Opaque: 77, ExtFields: protocol.Pairs("a", "b")}
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

// TestRequestBytesBudget: request bytes held at once are bounded by the
// budget, taken as a frame's bytes arrive: a connection that announces a
// large frame and sends little of it does not hold back others, one that
// sent most of the budget does until it goes away.
func TestRequestBytesBudget(t *testing.T) {
	budget := task.NewByteBudget(1 << 20)
	addr := startServerWith(t, Options{MaxFrameBytes: 1 << 20, Budget: budget})
	announce := func(sent int) net.Conn {
		c := dial(t, addr)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], 900<<10) // announces 900 KiB
		if _, err := c.Write(append(hdr[:], make([]byte, sent)...)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	answered := func(c net.Conn, opaque int32, within time.Duration) bool {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(within))
		var b [4]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return false
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		rest := make([]byte, binary.BigEndian.Uint32(b[:]))
		if _, err := io.ReadFull(c, rest); err != nil {
			t.Fatal(err)
		}
		cmd, err := protocol.Decode(rest)
		if err != nil || cmd.Opaque != opaque {
			t.Fatalf("answer %+v %v", cmd, err)
		}
		return true
	}
	big := func(opaque int32) net.Conn {
		c := dial(t, addr)
		if _, err := c.Write(protocol.AppendFrame(nil, &protocol.Command{Code: 1234, Opaque: opaque, Body: make([]byte, 900<<10)})); err != nil {
			t.Fatal(err)
		}
		return c
	}
	teaser := announce(10)
	defer teaser.Close()
	if !answered(big(7), 7, 10*time.Second) {
		t.Fatal("a connection that announced a large frame and sent 10 bytes of it held back another's request")
	}
	heavy := announce(600 << 10)
	for deadline := time.Now().Add(10 * time.Second); budget.Available() > 200<<10 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // until its bytes are read (and held)
	}
	waiting := big(9)
	if answered(waiting, 9, 500*time.Millisecond) {
		t.Fatal("a request beyond the budget was answered")
	}
	heavy.Close()
	if !answered(waiting, 9, 10*time.Second) {
		t.Fatal("the request was not answered once the budget was free")
	}
}
