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
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// sniff looks at a connection's first byte without consuming it and
// hands the connection on: a plaintext one as it is (so writev and the
// other fast paths of *net.TCPConn stay), a TLS one wrapped.
func (l *Listener) sniff(c net.Conn) {
	defer l.wg.Done()
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	first, err := peekByte(c)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	out := c
	switch {
	case first == handshakeRecord:
		out = tls.Server(c, l.config)
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

// Peeker is a connection that can show its next byte without consuming
// it (one that replays bytes read earlier, say).
type Peeker interface {
	PeekByte() (byte, error)
}

// peekByte returns the connection's first byte, leaving it to be read.
func peekByte(c net.Conn) (byte, error) {
	if p, ok := c.(Peeker); ok {
		return p.PeekByte()
	}
	return PeekSocket(c)
}

// PeekSocket returns the next byte waiting on a socket connection, leaving
// it to be read; the read deadline applies.
func PeekSocket(c net.Conn) (byte, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, errors.New("connection cannot be peeked")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var b [1]byte
	var n int
	var perr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK)
		return perr != unix.EAGAIN // false: wait until readable (deadline applies)
	})
	switch {
	case err != nil:
		return 0, err
	case perr != nil:
		return 0, perr
	case n == 0:
		return 0, io.EOF
	}
	return b[0], nil
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

// Files are a server's certificate, key and client-authentication
// settings (the tls section of the configuration).
type Files struct {
	CertFile, KeyFile        string
	ClientAuth, ClientCAFile string
}

// Wrap serves TLS on a named listener per its mode (listen.<name>_tls):
// permissive (TLS and plaintext on the one port, told apart by the first
// byte — what RocketMQ's proxy offers; no Kafka, remoting or HTTP request
// begins with a TLS handshake byte), enforcing, or disabled (l as is). The
// certificate is f's, re-read when its files change, or a self-signed one
// (the RocketMQ clients skip verification by default). l is closed on
// failure.
func Wrap(name string, l net.Listener, modeName string, f Files, log *slog.Logger, alpn ...string) (net.Listener, error) {
	mode, err := ParseMode(modeName)
	if err != nil || mode == Disabled {
		return l, err
	}
	cfg, err := ServerConfig(f.CertFile, f.KeyFile, alpn...)
	if err == nil {
		err = WithClientAuth(cfg, f.ClientAuth, f.ClientCAFile)
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	if f.CertFile == "" {
		log.Debug("TLS uses a self-signed certificate; set tls.cert_file and tls.key_file for a real one", "listener", name, "mode", mode)
	}
	return Listen(l, cfg, mode, log.With("listener", name)), nil
}
