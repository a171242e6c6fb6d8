// Package tlsmux serves TLS and plaintext connections on one listener,
// as RocketMQ's proxy does in its "permissive" TLS mode: the first byte a
// client sends tells a TLS handshake (a record of type 22) from anything
// else. Clients that default to TLS (the RocketMQ 5 clients do) and
// clients that speak plaintext reach the same port.
package tlsmux

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Mode says which connections a listener accepts.
type Mode string

const (
	// Disabled: plaintext only.
	Disabled Mode = "disabled"
	// Permissive: TLS and plaintext.
	Permissive Mode = "permissive"
	// Enforcing: TLS only; a plaintext connection is closed.
	Enforcing Mode = "enforcing"
)

// ParseMode reads a mode name (empty: permissive).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Permissive, nil
	case Disabled, Permissive, Enforcing:
		return m, nil
	}
	return "", fmt.Errorf("tls mode %q: want disabled, permissive or enforcing", s)
}

// handshakeRecord is the TLS record type of a ClientHello.
const handshakeRecord = 0x16

// sniffTimeout bounds the wait for a new connection's first byte.
const sniffTimeout = 10 * time.Second

// Listener accepts plaintext and TLS connections per its mode; TLS
// connections are returned unhandshaken (*tls.Conn handshakes on first
// use).
type Listener struct {
	inner  net.Listener
	config *tls.Config
	mode   Mode
	log    *slog.Logger
	conns  chan net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // the inner listener's failure, once it stopped
}

// Listen wraps l. With mode Disabled (or no TLS config) it returns l.
func Listen(l net.Listener, config *tls.Config, mode Mode, log *slog.Logger) net.Listener {
	if mode == Disabled || config == nil {
		return l
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ml := &Listener{inner: l, config: config, mode: mode, log: log, conns: make(chan net.Conn), ctx: ctx, cancel: cancel}
	ml.wg.Add(1)
	go ml.acceptLoop()
	return ml
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && l.ctx.Err() == nil {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.cancel()
			return
		}
		delay = 0
		l.wg.Add(1)
		go l.sniff(c)
	}
}

// sniff reads a connection's first byte and hands the connection on.
func (l *Listener) sniff(c net.Conn) {
	defer l.wg.Done()
	var first [1]byte
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	_, err := io.ReadFull(c, first[:])
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	var out net.Conn = &prefixedConn{Conn: c, first: first[0], unread: true}
	switch {
	case first[0] == handshakeRecord:
		out = tls.Server(out, l.config)
	case l.mode == Enforcing:
		l.log.Info("plaintext connection refused: TLS is enforced", "client", c.RemoteAddr().String())
		c.Close()
		return
	}
	select {
	case l.conns <- out:
	case <-l.ctx.Done():
		c.Close()
	}
}

// Accept returns the next connection, plaintext or TLS.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting and waits for connections being sniffed.
func (l *Listener) Close() error {
	l.cancel()
	err := l.inner.Close()
	l.wg.Wait()
	return err
}

// Addr is the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// prefixedConn gives back the sniffed byte before the rest.
type prefixedConn struct {
	net.Conn
	first  byte
	unread bool
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if c.unread && len(p) > 0 {
		c.unread = false
		p[0] = c.first
		return 1, nil
	}
	return c.Conn.Read(p)
}
