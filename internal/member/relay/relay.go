package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// Route is one of a member's listeners. Its connections go to the term's
// servers (Serve) while the member serves the listener's group, and are
// relayed to the group's leader — the same port on the leader's host —
// otherwise.
type Route struct {
	// Name names the listener in logs.
	Name string
	// Raw is the listener connections are accepted from.
	Raw net.Listener
	// Leader is the group's leader and its term as the member knows them
	// (0 while none is known).
	Leader func() (model.NodeID, model.Term)
	// Relays tracks the route's relayed connections.
	Relays *Set

	current atomic.Pointer[Listener]
}

// Serve hands the route's new connections to l until Stop.
func (rt *Route) Serve(l *Listener) { rt.current.Store(l) }

// Stop stops handing connections to the term's servers and returns the
// listener they were handed to (nil if none was).
func (rt *Route) Stop() *Listener { return rt.current.Swap(nil) }

// Serving reports whether the term's servers take the route's connections.
func (rt *Route) Serving() bool { return rt.current.Load() != nil }

// Relayer accepts a member's client connections and relays those of
// groups the member does not serve.
type Relayer struct {
	// Self is this member.
	Self model.NodeID
	// LocalHost is this member's host, relays dial from it ("" for any).
	LocalHost func() string
	// HostOf is a member's host (false for a node never known).
	HostOf func(model.NodeID) (string, bool)
	Log    *slog.Logger
}

// Wait bounds how long a connection waits for a leader to relay to (or for
// this member's servers to come up) before it is closed. A client whose
// first request finds the connection closed takes it for a
// misconfiguration (franz-go fails the records it was sending), so the
// wait outlasts clients' own request timeouts (10 s for franz-go), after
// which they try another broker.
const Wait = 30 * time.Second

// maxMoves bounds how often one connection follows the leadership before
// anything was answered on it.
const maxMoves = 5

// Accept accepts a route's connections until ctx ends.
func (r *Relayer) Accept(ctx context.Context, rt *Route) error {
	stop := context.AfterFunc(ctx, func() { rt.Raw.Close() })
	defer stop()
	for {
		c, err := rt.Raw.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("%s accept: %w", rt.Name, err)
		}
		cc := NewConn(c)
		if r.serveHere(ctx, cc, rt) {
			continue
		}
		go r.relay(ctx, cc, rt, 0)
	}
}

// serveHere hands c to this member's term servers while it serves the
// route. Should the term end before anything was answered on c, c moves to
// the next leader (a relay) instead of closing.
func (r *Relayer) serveHere(ctx context.Context, c *Conn, rt *Route) bool {
	cl := rt.current.Load()
	if cl == nil {
		return false
	}
	c.Handoff = func(nc *Conn) bool {
		if !cl.IsClosed() || ctx.Err() != nil {
			return false
		}
		go r.relay(ctx, nc, rt, 0)
		return true
	}
	if cl.Deliver(c) {
		return true
	}
	c.Handoff = nil
	return false
}

// relay forwards a client connection to its group leader's listener of
// the same name (same port, the leader's host), opened from this member's
// address. While no leader is reachable it waits; if this member starts
// serving meanwhile, its own servers take the connection. When the
// leader's end goes away before anything was answered (leadership moved),
// the connection moves to the next leader with its requests replayed.
func (r *Relayer) relay(ctx context.Context, c *Conn, rt *Route, moves int) {
	_, port, err := net.SplitHostPort(rt.Raw.Addr().String())
	if err != nil {
		CloseGracefully(c.Conn)
		return
	}
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(r.LocalHost())}}
	var up net.Conn
	var dialedLeader model.NodeID
	var dialedTerm model.Term
	deadline := time.Now().Add(Wait)
	for up == nil {
		if r.serveHere(ctx, c, rt) {
			return
		}
		leader, term := rt.Leader()
		// Never a host that is not the leader's own: an empty one would
		// dial this member's own listener, which relays again.
		if host, ok := r.HostOf(leader); ok && host != "" && leader != r.Self {
			if up, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, port)); err != nil {
				r.Log.Debug("relay to the leader", "listener", rt.Name, "leader", leader, "err", err)
			}
			dialedLeader, dialedTerm = leader, term
		}
		if up != nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			// Its requests are unanswered: a reset makes the client
			// retry them (another broker, or later).
			CloseReset(c.Conn)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	rt.Relays.add(c, up)
	defer rt.Relays.remove(c)
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
				clientGone <- !errors.Is(err, ErrDetached)
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
		// Only when leadership moved, or this member now serves the
		// listener itself (its Kafka front ends relays when it starts): a
		// leader that closed the connection itself meant it. This member
		// may learn of the move a little after the old leader's end went
		// away.
		moved := func() bool {
			leader, term := rt.Leader()
			return leader != dialedLeader || term != dialedTerm || rt.Serving()
		}
		for wait := time.Now().Add(3 * time.Second); !moved() && time.Now().Before(wait) && ctx.Err() == nil; {
			time.Sleep(20 * time.Millisecond)
		}
		if moved() {
			if nc := c.Detach(); nc != nil {
				up.Close()
				wg.Wait()
				go r.relay(ctx, nc, rt, moves+1)
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
		CloseReset(c.Conn)
	} else {
		CloseGracefully(c.Conn)
	}
	up.Close()
	wg.Wait()
}
