package relay

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestClientConnMovesUnansweredRequests: bytes read by one owner, with
// nothing answered, are read again by the next; a reader blocked on the
// socket is woken by the move.
func TestClientConnMovesUnansweredRequests(t *testing.T) {
	client, server := tcpPair(t)
	c := NewConn(server)
	if _, err := client.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() { _, err := c.Read(buf); blocked <- err }()
	time.Sleep(20 * time.Millisecond)
	nc := c.Detach()
	if nc == nil {
		t.Fatal("an unanswered connection did not move")
	}
	if err := <-blocked; !errors.Is(err, ErrDetached) {
		t.Fatalf("the old owner's read: %v", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, ErrDetached) {
		t.Fatalf("the old owner wrote after the move: %v", err)
	}
	if _, err := client.Write([]byte("-second")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("first-second"))
	if _, err := io.ReadFull(nc, got); err != nil || string(got) != "first-second" {
		t.Fatalf("the next owner read %q, %v", got, err)
	}
	// Once answered, the connection closes rather than moves.
	if _, err := nc.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	if nc.Detach() != nil {
		t.Fatal("an answered connection moved")
	}
	moved := false
	nc.Handoff = func(*Conn) bool { moved = true; return true }
	nc.Close()
	if moved {
		t.Fatal("Handoff asked for an answered connection")
	}
	if _, err := client.Read(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("after close: %v", err)
	}
}

// TestClientConnKeepsOnlySmallRequests: past maxReplayBytes nothing is kept
// and the connection no longer moves.
func TestClientConnKeepsOnlySmallRequests(t *testing.T) {
	client, server := tcpPair(t)
	c := NewConn(server)
	go func() { _, _ = client.Write(make([]byte, maxReplayBytes+1)) }()
	if _, err := io.ReadFull(c, make([]byte, maxReplayBytes+1)); err != nil {
		t.Fatal(err)
	}
	if c.Detach() != nil {
		t.Fatal("a connection past the replay bound moved")
	}
}

// TestClientConnResetsWhenNotClosedGracefully: a socket closed other than
// by Close — as the kernel closes it when the member dies — or by
// CloseReset reaches the client as a reset after what was written, never
// as an end of stream (which clients take for a misconfiguration before
// their first answer).
func TestClientConnResetsWhenNotClosedGracefully(t *testing.T) {
	for name, closeIt := range map[string]func(*Conn){
		"socket closed": func(c *Conn) { c.Conn.Close() },
		"CloseReset":    func(c *Conn) { CloseReset(c.Conn) },
	} {
		t.Run(name, func(t *testing.T) {
			client, server := tcpPair(t)
			c := NewConn(server)
			if _, err := c.Write([]byte("answer")); err != nil {
				t.Fatal(err)
			}
			closeIt(c)
			got := make([]byte, len("answer"))
			if _, err := io.ReadFull(client, got); err != nil || string(got) != "answer" {
				t.Fatalf("read %q, %v", got, err)
			}
			if _, err := client.Read(got); err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("after the close: %v, want a reset", err)
			}
		})
	}
}
