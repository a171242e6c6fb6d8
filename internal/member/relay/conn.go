package relay

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/tlsmux"
)

// maxReplayBytes bounds what a client connection keeps of its requests
// while nothing has answered them (clients' first requests — Kafka
// ApiVersions, SASL, a RocketMQ heartbeat — are far smaller).
const maxReplayBytes = 64 << 10

// ErrDetached is what the previous owner of a moved connection gets.
var ErrDetached = errors.New("client connection moved to the leader")

// Conn is a cluster member's client connection as one owner — a
// term's protocol server, or a relay to the leader — sees it. Until the
// first byte of an answer reaches the client it keeps every byte the
// client sent, so that when leadership moves before anything was answered
// the connection moves too (Detach) and its requests are replayed to the
// next leader, instead of being closed: a client whose connection closes
// before its first answer takes that for a misconfiguration (franz-go
// fails the records it was sending). What was answered is never replayed.
type Conn struct {
	net.Conn
	mu       sync.Mutex
	readMu   sync.Mutex // held across a read of the socket
	pending  []byte     // kept bytes a new owner reads before the socket's
	kept     []byte     // every byte read while nothing was answered
	answered bool       // a byte went back, or kept overflowed: never replayed
	detached bool
	// Handoff, when set, is asked on Close whether the connection moves
	// rather than closes; it takes the detached connection if so.
	Handoff func(*Conn) bool
}

// NewConn takes an accepted connection. Its socket is set to reset
// when closed without CloseGracefully — above all when the member dies: a
// client whose request finds the connection merely closed (end of stream)
// before its first answer takes that for a misconfiguration and fails the
// request (franz-go fails the records it was sending, taking it for missing
// SASL), while a reset is a network failure every client retries.
func NewConn(c net.Conn) *Conn {
	setReset(c, true)
	return &Conn{Conn: c}
}

// setReset makes a TCP socket's close abortive (a reset, unsent bytes
// dropped) or, with on false, graceful again.
func setReset(c net.Conn, on bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	sec := -1
	if on {
		sec = 0
	}
	_ = tc.SetLinger(sec)
}

// CloseGracefully closes the socket with an orderly end of stream: what
// was written reaches the client first.
func CloseGracefully(c net.Conn) error {
	setReset(c, false)
	return c.Close()
}

// CloseReset closes the socket with a reset, for a connection whose
// requests may be unanswered because leadership went away under them: the
// client retries them elsewhere (see NewConn).
func CloseReset(c net.Conn) error {
	setReset(c, true)
	return c.Close()
}

// Read returns kept bytes replayed to this owner first, then the socket's.
func (c *Conn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.mu.Lock()
	if c.detached {
		c.mu.Unlock()
		return 0, ErrDetached
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.answered && n > 0 {
		if len(c.kept)+n > maxReplayBytes {
			c.answered, c.kept = true, nil
		} else {
			c.kept = append(c.kept, p[:n]...)
		}
	}
	if c.detached {
		// What was read is kept for the next owner.
		return 0, ErrDetached
	}
	return n, err
}

// PeekByte shows the next byte Read returns without consuming it (the
// listener's TLS sniffing looks at the first byte).
func (c *Conn) PeekByte() (byte, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		b := c.pending[0]
		c.mu.Unlock()
		return b, nil
	}
	c.mu.Unlock()
	return tlsmux.PeekSocket(c.Conn)
}

// Write marks the connection answered: from now on it closes rather than
// moves.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.detached {
		c.mu.Unlock()
		return 0, ErrDetached
	}
	if len(p) > 0 {
		c.answered, c.kept, c.pending = true, nil, nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Close closes the socket, unless Handoff takes the connection to the
// next leader (nothing was answered yet).
func (c *Conn) Close() error {
	if h := c.Handoff; h != nil {
		if nc := c.Detach(); nc != nil {
			if h(nc) {
				return nil
			}
			return CloseGracefully(nc.Conn)
		}
	}
	c.mu.Lock()
	detached := c.detached
	c.mu.Unlock()
	if detached {
		return nil
	}
	return CloseGracefully(c.Conn)
}

// Detach ends this owner's use of the socket and returns the connection
// for the next owner, who reads the kept bytes first; nil when something
// was answered (or the connection is already detached or closed).
func (c *Conn) Detach() *Conn {
	c.mu.Lock()
	if c.answered || c.detached {
		c.mu.Unlock()
		return nil
	}
	c.detached = true
	c.mu.Unlock()
	// Wake a read blocked on the socket and wait for it to return; what
	// it read lands in kept.
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
	c.readMu.Lock()
	c.readMu.Unlock() //nolint:staticcheck // waiting for the reader only
	_ = c.Conn.SetReadDeadline(time.Time{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered {
		return nil
	}
	kept := append([]byte(nil), c.kept...)
	return &Conn{Conn: c.Conn, kept: kept, pending: kept}
}

// SetDeadline and the others reach the socket while this owner has it.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.isDetached() {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.isDetached() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.isDetached() {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *Conn) isDetached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detached
}

// Replayable reports whether nothing was answered yet.
func (c *Conn) Replayable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.answered && !c.detached
}
