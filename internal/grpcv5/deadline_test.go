package grpcv5

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestFrameDeadlines: frames that arrive whole pass whatever the pauses
// between them; a frame that stops half-way fails its read at the deadline.
func TestFrameDeadlines(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	l := frameDeadlineListener{base: 200 * time.Millisecond}
	c := &frameDeadlineConn{Conn: server, base: l.base, remaining: len(http2Preface)}
	go func() {
		_, _ = client.Write([]byte(http2Preface))
		_, _ = client.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}) // an empty SETTINGS frame
		time.Sleep(400 * time.Millisecond)                     // idle between frames: allowed
		_, _ = client.Write([]byte{0, 0, 3, 0, 1, 0, 0, 0, 1, 'a', 'b', 'c'})
		_, _ = client.Write([]byte{0, 0, 5, 0, 1, 0, 0, 0, 1, 'a'}) // a frame that stops
	}()
	buf := make([]byte, 64)
	var got int
	for got < len(http2Preface)+9+12+10 {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		got += n
	}
	start := time.Now()
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a frame stopped half-way: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waited %v", waited)
	}
}
