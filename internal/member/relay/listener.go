package relay

import (
	"net"
	"sync"
)

// Listener is a net.Listener fed with connections another accept loop
// took: a term's protocol servers accept from it while the member serves
// the listener's group.
type Listener struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

// NewListener makes a Listener reporting addr (the real listener's).
func NewListener(addr net.Addr) *Listener {
	return &Listener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Deliver hands c to Accept; false once the listener is closed.
func (l *Listener) Deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next delivered connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Deliver.
func (l *Listener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

// IsClosed reports whether Close was called (the term ended).
func (l *Listener) IsClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Addr is the real listener's address.
func (l *Listener) Addr() net.Addr { return l.addr }
