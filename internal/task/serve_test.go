package task

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestServeConnsClosesOnShutdown: cancelling the context stops accepting,
// closes open connections and waits for their handlers.
func TestServeConnsClosesOnShutdown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	handled := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- ServeConns(ctx, "test", l, func(ctx context.Context, nc net.Conn) {
			close(handled)
			_, _ = nc.Read(make([]byte, 1)) // blocks until the connection is closed
		})
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	<-handled
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConns did not return")
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection left open")
	}
}
