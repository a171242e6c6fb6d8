package task

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// drive feeds the controller requests at rate per second for d, starting
// at *now, and reports whether it lingered at the end.
func drive(c *lingerControl, now *time.Time, rate float64, d time.Duration) bool {
	step := time.Duration(float64(time.Second) / rate)
	for end := now.Add(d); now.Before(end); *now = now.Add(step) {
		c.request(*now)
	}
	return c.on
}

func TestLingerControlKeepsLingeringWhenThePeerDoesNotSlowDown(t *testing.T) {
	now := time.Unix(0, 0)
	c := newLingerControl(300*time.Microsecond, now)
	if !drive(&c, &now, 20000, time.Second) {
		t.Fatal("a peer whose rate lingering leaves alone is not lingered for")
	}
	// It stays on through later trials.
	for range 5 {
		if !drive(&c, &now, 20000, 4*time.Second) {
			t.Fatal("lingering stopped although the peer's rate held")
		}
	}
}

// slowed is a peer whose rate falls to a third while the connection
// lingers (a few synchronous senders waiting on every linger).
func slowed(c *lingerControl, now *time.Time, d time.Duration) (lingered time.Duration) {
	for end := now.Add(d); now.Before(end); {
		rate := 20000.0
		if c.on {
			rate /= 3
			lingered += time.Duration(float64(time.Second) / rate)
		}
		c.request(*now)
		*now = now.Add(time.Duration(float64(time.Second) / rate))
	}
	return lingered
}

func TestLingerControlStopsForAPeerItSlowsDown(t *testing.T) {
	now := time.Unix(0, 0)
	c := newLingerControl(300*time.Microsecond, now)
	lingered := slowed(&c, &now, time.Minute)
	if c.on {
		t.Fatal("lingering for a peer it slows down")
	}
	// Trials back off: over a minute, a few trials of 0.3 s each.
	if lingered > 3*time.Second {
		t.Fatalf("lingered %v of a minute for a peer it slows down", lingered)
	}
}

func TestLingerControlIdlePeer(t *testing.T) {
	now := time.Unix(0, 0)
	c := newLingerControl(300*time.Microsecond, now)
	drive(&c, &now, 20000, time.Second)
	if drive(&c, &now, 1000, time.Second) {
		t.Fatal("lingering for a peer sending too little to batch")
	}
}

// TestLingerConnDeliversEverything: while lingering, a read returns what
// arrived once the linger passed (a lone small request is not held until
// more come), and every byte arrives in order.
func TestLingerConnDeliversEverything(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	wrapped := NewLingerConn(server, time.Millisecond, 4096)
	lc, ok := wrapped.(*LingerConn)
	if !ok {
		t.Fatalf("a TCP connection was not wrapped: %T", wrapped)
	}
	defer lc.Close()
	lc.ctl.on = true // as after a trial that kept it

	var pieces [][]byte
	var sent bytes.Buffer
	for i := range 200 {
		pieces = append(pieces, bytes.Repeat([]byte{byte(i)}, 1+i%37))
		sent.Write(pieces[i])
	}
	go func() {
		for i, piece := range pieces {
			if _, err := client.Write(piece); err != nil {
				return
			}
			if i%50 == 0 {
				time.Sleep(5 * time.Millisecond) // a pause: the reader must not wait for it
			}
		}
		client.(*net.TCPConn).CloseWrite()
	}()
	_ = lc.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(lc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent.Bytes()) {
		t.Fatalf("read %d bytes, sent %d, or not in order", len(got), sent.Len())
	}

	// A single small piece with nothing after it is read within the
	// linger's order of magnitude, not held for a batch.
	client2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	server2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	lc2 := NewLingerConn(server2, time.Millisecond, 4096).(*LingerConn)
	defer lc2.Close()
	lc2.ctl.on = true
	if _, err := client2.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = lc2.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 16)
	n, err := lc2.Read(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	// The caller's deadline still holds while lingering.
	_ = lc2.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := lc2.Read(buf); err == nil {
		t.Fatal("a read past the caller's deadline did not fail")
	}
}
