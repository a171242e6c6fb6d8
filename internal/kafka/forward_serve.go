package kafka

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

// A member answers forwarded requests (Forwarded) on streams: each stream
// is one client connection of a protocol-only node as this member serves
// it — a connection of its own (its SASL exchange, principal and
// namespace) without a socket — and its requests are handled one at a
// time in their order, their durability waits overlapping as on a real
// connection.

// streamIdle is how long a stream nobody sends on is kept.
const streamIdle = 5 * time.Minute

// streamKey names a stream: the protocol-only node and its stream id.
type streamKey struct {
	from   int32
	stream uint64
}

// forwardStream is one stream's connection and its place in the order.
type forwardStream struct {
	c    *conn
	mu   sync.Mutex
	cond *sync.Cond
	next uint64 // the sequence number handled next
	used time.Time
}

// forwardStreams are the streams a member serves.
type forwardStreams struct {
	mu      sync.Mutex
	streams map[streamKey]*forwardStream
	swept   time.Time
}

// stream returns the stream k (made on its first request).
func (s *Server) stream(k streamKey, f Forwarded) *forwardStream {
	fs := &s.forwards
	fs.mu.Lock()
	defer fs.mu.Unlock()
	now := time.Now()
	if now.Sub(fs.swept) > time.Minute {
		fs.swept = now
		for key, st := range fs.streams {
			st.mu.Lock()
			idle := now.Sub(st.used) > streamIdle
			st.mu.Unlock()
			if idle {
				st.c.cancel()
				delete(fs.streams, key)
			}
		}
	}
	if st := fs.streams[k]; st != nil {
		return st
	}
	if fs.streams == nil {
		fs.streams = map[streamKey]*forwardStream{}
	}
	addr, err := net.ResolveTCPAddr("tcp", f.ClientAddr)
	if err != nil {
		addr = &net.TCPAddr{}
	}
	// The protocol-only node decides whether its clients authenticate; a
	// stream takes SASL once its client starts it.
	c := &conn{s: s, nc: forwardedConn{remote: addr}, listener: Listener{Protocol: ProtocolSASLPlaintext},
		log: s.log.With("client", f.ClientAddr, "forwarded_by", k.from)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.gone = c.ctx
	c.auth.principal = security.Anonymous
	c.auth.host = addr.IP.String()
	st := &forwardStream{c: c, next: 1, used: now}
	st.cond = sync.NewCond(&st.mu)
	fs.streams[k] = st
	return st
}

// ServeForwarded answers a request a protocol-only node (node from)
// forwarded, in its stream's order.
func (s *Server) ServeForwarded(ctx context.Context, from int32, f Forwarded) (ForwardAnswer, error) {
	st := s.stream(streamKey{from, f.Stream}, f)
	st.mu.Lock()
	if f.Seq < st.next {
		st.mu.Unlock()
		return ForwardAnswer{}, fmt.Errorf("%w: stream %d request %d answered already", model.ErrCorruptRecord, f.Stream, f.Seq)
	}
	stop := context.AfterFunc(ctx, func() { st.mu.Lock(); st.cond.Broadcast(); st.mu.Unlock() })
	waitStart := time.Now()
	for f.Seq != st.next && ctx.Err() == nil {
		st.cond.Wait()
	}
	stop()
	if w := time.Since(waitStart); w > time.Second {
		s.log.Warn("a forwarded request waited for the ones before it", "stream", f.Stream, "seq", f.Seq, "waited", w, "api", f.Key)
	}
	if ctx.Err() != nil {
		st.mu.Unlock()
		return ForwardAnswer{}, fmt.Errorf("stream %d request %d: the ones before it never came: %w", f.Stream, f.Seq, ctx.Err())
	}
	c := st.c
	if f.Principal != "" {
		if p, err := parsePrincipal(f.Principal); err == nil && p != c.auth.principal {
			c.auth.principal = p
			if sec := s.opts.Security; sec != nil {
				if h, ok := parseHome(sec.UserNamespace(p.Name)); ok {
					c.home = h
				}
			}
		}
	}
	if f.Key == saslHandshakeKey {
		c.auth.needSASL = true
	}
	wasAuthenticated := c.auth.principal
	req := &request{hdr: requestHeader{Key: f.Key, Version: f.Version, ClientID: f.ClientID}, body: f.Body}
	r := c.dispatch(req)
	var ans ForwardAnswer
	if c.auth.principal != wasAuthenticated {
		ans.Principal = formatPrincipal(c.auth.principal)
	}
	if f.Key == 3 && r.resp != nil { // Metadata: where each partition lives
		ans.Groups = s.partitionGroups(c.home, r.resp.(*kmsg.MetadataResponse))
	}
	st.next++
	st.used = time.Now()
	st.cond.Broadcast()
	st.mu.Unlock()
	if r.await != nil {
		r.await()
	}
	switch {
	case r.closeConn:
		return ForwardAnswer{Close: true}, nil
	case r.resp != nil && !r.none:
		ans.Body = r.resp.AppendTo(nil)
	}
	ans.Close = r.closeAfter
	return ans, nil
}

// partitionGroups is the replication group of each partition of the
// topics a Metadata answer names.
func (s *Server) partitionGroups(h home, resp *kmsg.MetadataResponse) map[string][]int32 {
	cat := s.cat()
	if cat == nil {
		return nil
	}
	out := map[string][]int32{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		name, err := s.topicName(h, *t.Topic)
		if err != nil {
			continue
		}
		topic, err := cat.Topic(name)
		if err != nil {
			continue
		}
		groups := make([]int32, len(topic.All))
		for i := range groups {
			groups[i] = int32(topic.GroupOf(i))
		}
		out[*t.Topic] = groups
	}
	return out
}

// forwardedConn stands for a forwarded request's client connection: its
// address is the client's, nothing is read or written through it.
type forwardedConn struct{ remote *net.TCPAddr }

func (c forwardedConn) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (c forwardedConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c forwardedConn) Close() error                     { return nil }
func (c forwardedConn) LocalAddr() net.Addr              { return nil }
func (c forwardedConn) RemoteAddr() net.Addr             { return c.remote }
func (c forwardedConn) SetDeadline(time.Time) error      { return nil }
func (c forwardedConn) SetReadDeadline(time.Time) error  { return nil }
func (c forwardedConn) SetWriteDeadline(time.Time) error { return nil }
