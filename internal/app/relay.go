package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// acceptRoute accepts a listener's connections for as long as the node
// runs.
func (a *App) acceptRoute(ctx context.Context, rt *listenerRoute) error {
	stop := context.AfterFunc(ctx, func() { rt.ep.raw.Close() })
	defer stop()
	for {
		c, err := rt.ep.raw.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("%s accept: %w", rt.ep.name, err)
		}
		cc := newClientConn(c)
		if a.serveHere(ctx, cc, rt) {
			continue
		}
		go a.relay(ctx, cc, rt, 0)
	}
}

// serveHere hands c to this node's term servers while it leads. Should
// the term end before anything was answered on c, c moves to the next
// leader (a relay) instead of closing.
func (a *App) serveHere(ctx context.Context, c *clientConn, rt *listenerRoute) bool {
	cl := rt.current.Load()
	if cl == nil {
		return false
	}
	c.handoff = func(nc *clientConn) bool {
		if !cl.isClosed() || ctx.Err() != nil {
			return false
		}
		go a.relay(ctx, nc, rt, 0)
		return true
	}
	if cl.deliver(c) {
		return true
	}
	c.handoff = nil
	return false
}

// relayWait bounds how long a connection waits for a leader to relay to
// (or for this node's stack to come up) before it is closed. A client
// whose first request finds the connection closed takes it for a
// misconfiguration (franz-go fails the records it was sending), so the
// wait outlasts clients' own request timeouts (10 s for franz-go), after
// which they try another broker.
const relayWait = 30 * time.Second

// maxMoves bounds how often one connection follows the leadership before
// anything was answered on it.
const maxMoves = 5

// relay forwards a client connection to its group leader's listener of
// the same name (same port, the leader's host), opened from this node's address.
// While no leader is reachable it waits; if this node starts leading
// meanwhile, its own servers take the connection. When the leader's end
// goes away before anything was answered (leadership moved), the
// connection moves to the next leader with its requests replayed.
func (a *App) relay(ctx context.Context, c *clientConn, rt *listenerRoute, moves int) {
	r, gr := a.replica, rt.grp
	_, port, err := net.SplitHostPort(rt.ep.raw.Addr().String())
	if err != nil {
		closeGracefully(c.Conn)
		return
	}
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(r.members()[r.self])}}
	var up net.Conn
	var dialedLeader model.NodeID
	var dialedTerm model.Term
	deadline := time.Now().Add(relayWait)
	for up == nil {
		if a.serveHere(ctx, c, rt) {
			return
		}
		leader, term := gr.leader()
		// Never a host that is not the leader's own: an empty one would
		// dial this node's own listener, which relays again.
		if host, ok := r.hostOf(leader); ok && host != "" && leader != r.self {
			if up, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, port)); err != nil {
				a.log.Debug("relay to the leader", "listener", rt.ep.name, "leader", leader, "err", err)
			}
			dialedLeader, dialedTerm = leader, term
		}
		if up != nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			// Its requests are unanswered: a reset makes the client
			// retry them (another broker, or later).
			closeReset(c.Conn)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	rt.relays.add(c, up)
	defer rt.relays.remove(c)
	var wg sync.WaitGroup
	clientGone := make(chan bool, 1) // false: the leader's end failed a write
	upGone := make(chan error, 1)    // why the leader's end stopped
	wg.Add(2)
	go func() { // client → leader
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := up.Write(buf[:n]); werr != nil {
					clientGone <- false
					return
				}
			}
			if err != nil {
				clientGone <- !errors.Is(err, errDetached)
				return
			}
		}
	}()
	go func() { // leader → client
		defer wg.Done()
		buf := make([]byte, 32<<10)
		var err error
		for err == nil {
			var n int
			n, err = up.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil && err == nil {
					err = werr
				}
			}
		}
		upGone <- err
	}()
	move, reset := false, false
	var upErr error
	select {
	case gone := <-clientGone:
		move = !gone
	case upErr = <-upGone:
		move = true
	case <-ctx.Done():
	}
	if move && ctx.Err() == nil && moves < maxMoves {
		// Only when leadership moved, or this node now serves the listener
		// itself (its Kafka front ends relays when it starts): a leader that
		// closed the connection itself meant it. This node may learn of the
		// move a little after the old leader's end went away.
		moved := func() bool {
			leader, term := gr.leader()
			return leader != dialedLeader || term != dialedTerm || rt.current.Load() != nil
		}
		for wait := time.Now().Add(3 * time.Second); !moved() && time.Now().Before(wait) && ctx.Err() == nil; {
			time.Sleep(20 * time.Millisecond)
		}
		if moved() {
			if nc := c.detach(); nc != nil {
				up.Close()
				wg.Wait()
				go a.relay(ctx, nc, rt, moves+1)
				return
			}
			// Answers went back already: the client reconnects. Unless
			// the old leader ended the connection in order (it answered
			// what it read first), a reset makes the client retry what
			// is still unanswered.
			reset = !errors.Is(upErr, io.EOF)
		}
	}
	if reset {
		closeReset(c.Conn)
	} else {
		closeGracefully(c.Conn)
	}
	up.Close()
	wg.Wait()
}

// relaySet tracks relayed connection pairs, to close them when leadership
// moves.
type relaySet struct {
	mu    sync.Mutex
	conns map[*clientConn]net.Conn
}

func (s *relaySet) add(c *clientConn, up net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*clientConn]net.Conn{}
	}
	s.conns[c] = up
}

func (s *relaySet) remove(c *clientConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// closeUpstreams closes the relays' connections to the leader: each
// relayed connection moves to the next leader if nothing was answered on
// it yet, and closes otherwise.
func (s *relaySet) closeUpstreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, up := range s.conns {
		up.Close()
	}
}

// closeAll closes every relayed connection (the node stops), with a reset:
// the client retries what is unanswered.
func (s *relaySet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, up := range s.conns {
		closeReset(c.Conn)
		up.Close()
	}
	clear(s.conns)
}
