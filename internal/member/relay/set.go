package relay

import (
	"net"
	"sync"
)

// Set tracks relayed connection pairs, to close them when leadership
// moves.
type Set struct {
	mu    sync.Mutex
	conns map[*Conn]net.Conn
}

func (s *Set) add(c *Conn, up net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*Conn]net.Conn{}
	}
	s.conns[c] = up
}

func (s *Set) remove(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// CloseUpstreams closes the relays' connections to the leader: each
// relayed connection moves to the next leader if nothing was answered on
// it yet, and closes otherwise.
func (s *Set) CloseUpstreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, up := range s.conns {
		up.Close()
	}
}

// CloseAll closes every relayed connection (the member stops), with a
// reset: the client retries what is unanswered.
func (s *Set) CloseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, up := range s.conns {
		CloseReset(c.Conn)
		up.Close()
	}
	clear(s.conns)
}
