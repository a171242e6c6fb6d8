package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/task"
)

// Proxy is a protocol-only node's Kafka front-end. It holds no partition:
// it tells clients it leads every partition and coordinates every group —
// as one broker per replication group (brokers), with the groups' real
// leader epochs, so KIP-320 clients still detect a leader change — and
// forwards each request to the leaders of the
// replication groups it concerns — a produce or fetch split by the groups
// of its partitions and the answers merged, a coordinator's request to the
// leader of the group its id hashes to, anything else to group 0's leader —
// as calls between nodes (Forwarded), each client connection a stream of
// its own on each member. Fetch sessions are not kept (clients fetch in
// full), so a member's answer never depends on an earlier one.
type Proxy struct {
	opts    ProxyOptions
	log     *slog.Logger
	streams atomic.Uint64
	cache   topicCache
}

// ProxyOptions configure a Proxy.
type ProxyOptions struct {
	// NodeID is this node's id, the leader and coordinator clients are
	// told of.
	NodeID int32
	// Nodes are the protocol-only nodes by id, each with its host (they
	// listen on this node's port); this one among them.
	Nodes func() map[int32]string
	// Groups is how many replication groups the cluster has now;
	// MadeGroups how many it was made with (coordinators hash over them).
	Groups     func() int
	MadeGroups func() int
	// Leader is the member leading a group (0 while none is known).
	Leader func(group int) int32
	// Forward sends a request to member node and returns its answer.
	Forward       func(ctx context.Context, node int32, f Forwarded) (ForwardAnswer, error)
	Logger        *slog.Logger
	MaxFrameBytes int32
	IdleTimeout   time.Duration
	// SASL makes clients authenticate before anything else.
	SASL bool
}

// NewProxy makes a Proxy.
func NewProxy(opts ProxyOptions) *Proxy {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = 100 << 20
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	p := &Proxy{opts: opts, log: opts.Logger.With("component", "kafka-proxy")}
	p.streams.Store(uint64(time.Now().UnixNano()))
	return p
}

// GroupSpan is how many replication groups' broker ids a protocol-only
// node has: node n is broker n×GroupSpan+g for group g (vid).
const GroupSpan = 64

// MaxProxyNodeID is the largest protocol-only node id whose broker ids fit
// Kafka's int32.
const MaxProxyNodeID = (1<<31 - 1) / GroupSpan

// vid is protocol-only node id's broker id for group g.
func (p *Proxy) vid(id int32, g int) int32 { return id*GroupSpan + int32(g%GroupSpan) }

// Serve serves l's connections until ctx ends.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	return task.ServeConns(ctx, "kafka-proxy", l, func(ctx context.Context, nc net.Conn) { p.newConn(nc).serve(ctx) })
}

// proxyConn is one client connection.
type proxyConn struct {
	p         *Proxy
	nc        net.Conn
	log       *slog.Logger
	port      int32
	principal atomic.Pointer[string] // "" until authenticated
	mu        sync.Mutex
	streams   map[int32]*proxyStream // by member
	// lastIssued is closed once the latest request read placed its parts
	// in their streams (read's goroutine only).
	lastIssued chan struct{}
}

// proxyStream is this connection's stream to one member.
type proxyStream struct {
	id, seq uint64
}

func (p *Proxy) newConn(nc net.Conn) *proxyConn {
	c := &proxyConn{p: p, nc: nc, log: p.log.With("client", nc.RemoteAddr().String()), streams: map[int32]*proxyStream{}}
	if _, port, err := net.SplitHostPort(nc.LocalAddr().String()); err == nil {
		n, _ := strconv.Atoi(port)
		c.port = int32(n)
	}
	empty := ""
	c.principal.Store(&empty)
	c.lastIssued = make(chan struct{})
	close(c.lastIssued)
	return c
}

// pending is a request on its way: its header and, once known, its answer.
type pending struct {
	hdr  requestHeader
	done chan struct{}
	// prev is closed once the request before it placed its parts in their
	// streams; issued once this one has (issuedAll).
	prev, issued chan struct{}
	issueOnce    sync.Once
	resp         []byte // the response body; nil: none (acks=0)
	// close closes the connection after resp (or instead, resp nil).
	close bool
}

func (c *proxyConn) serve(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan *pending, 64)
	go func() {
		defer cancel()
		c.write(queue)
	}()
	c.read(ctx, queue)
	close(queue)
	<-ctx.Done()
	c.nc.Close()
}

// read frames requests and starts each; its answers are written in order.
func (c *proxyConn) read(ctx context.Context, queue chan<- *pending) {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var size [4]byte
	for ctx.Err() == nil {
		err := task.AwaitRequest(c.nc, r, c.p.opts.IdleTimeout)
		if err == nil {
			_, err = io.ReadFull(r, size[:])
		}
		if err != nil {
			return
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		if n < 10 || n > c.p.opts.MaxFrameBytes {
			c.log.Warn("closing connection: bad frame size", "size", n, "limit", c.p.opts.MaxFrameBytes)
			return
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(r, frame); err != nil {
			return
		}
		hdr, body, err := parseRequestHeader(frame, flexibleRequest)
		if err != nil {
			c.log.Warn("closing connection: malformed request header", "err", err)
			return
		}
		pd := &pending{hdr: hdr, done: make(chan struct{})}
		if !c.start(ctx, pd, body) {
			return
		}
		select {
		case queue <- pd:
		case <-ctx.Done():
			return
		}
	}
}

// write sends the answers in request order.
func (c *proxyConn) write(queue <-chan *pending) {
	w := bufio.NewWriterSize(c.nc, 64<<10)
	for pd := range queue {
		select {
		case <-pd.done:
		default:
			// What is written goes out before waiting for the next
			// answer (it may take a member's commit, or a fetch's wait).
			if err := w.Flush(); err != nil {
				return
			}
			<-pd.done
		}
		if pd.resp != nil {
			buf := make([]byte, 4, 16+len(pd.resp))
			buf = appendResponseHeader(buf, pd.hdr.CorrelationID, flexibleResponse(pd.hdr))
			buf = append(buf, pd.resp...)
			binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
			_ = c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
		if len(queue) == 0 || pd.close {
			if err := w.Flush(); err != nil {
				return
			}
		}
		if pd.close {
			c.nc.Close()
			return
		}
	}
	_ = w.Flush()
}

// issuedAll marks pd's parts as placed in their streams: the next request
// may place its own.
func (pd *pending) issuedAll() {
	pd.issueOnce.Do(func() {
		if pd.issued != nil {
			close(pd.issued)
		}
	})
}

// flexibleResponse reports whether a request's response has header v1
// (ApiVersions never does: KIP-511).
func flexibleResponse(h requestHeader) bool {
	return h.Key != apiVersionsKey && flexibleRequest(h.Key, h.Version)
}

// start handles one request: it decodes it, checks it and starts what
// answers it (pd.done closes once answered). False: close the connection.
func (c *proxyConn) start(ctx context.Context, pd *pending, body []byte) bool {
	h := lookupHandler(pd.hdr.Key)
	if h == nil {
		c.log.Warn("closing connection: unknown API key", "api", pd.hdr.Key, "client_id", pd.hdr.ClientID)
		return false
	}
	if pd.hdr.Version < h.min || pd.hdr.Version > h.max {
		if pd.hdr.Key == apiVersionsKey {
			pd.hdr.Version = 0
			c.answer(pd, apiVersionsDowngrade(), false)
			return true
		}
		c.log.Warn("closing connection: unsupported API version", "api", kmsg.NameForKey(pd.hdr.Key), "version", pd.hdr.Version)
		return false
	}
	req := kmsg.RequestForKey(pd.hdr.Key)
	req.SetVersion(pd.hdr.Version)
	if err := req.ReadFrom(body); err != nil {
		c.log.Warn("closing connection: malformed request", "api", kmsg.NameForKey(pd.hdr.Key), "err", err)
		return false
	}
	if c.p.opts.SASL && *c.principal.Load() == "" && pd.hdr.Key != apiVersionsKey && pd.hdr.Key != saslHandshakeKey && pd.hdr.Key != saslAuthenticateKey {
		c.log.Warn("closing connection: request before SASL authentication completed", "api", pd.hdr.Key)
		return false
	}
	pd.prev, pd.issued = c.lastIssued, make(chan struct{})
	c.lastIssued = pd.issued
	go c.handle(ctx, pd, req)
	return true
}

// answer completes pd with resp.
func (c *proxyConn) answer(pd *pending, resp kmsg.Response, closeAfter bool) {
	if resp != nil {
		resp.SetVersion(pd.hdr.Version)
		pd.resp = resp.AppendTo(nil)
	}
	pd.close = closeAfter
	close(pd.done)
}

// preparedCall is a request to forward with its place in its stream.
type preparedCall struct {
	leader int32
	st     *proxyStream
	f      Forwarded
	hdr    requestHeader
	req    kmsg.Request
	err    error
}

// prepare gives a request for group g's leader its place in this
// connection's stream to that member. A connection's requests take their
// places in the order the client sent them (pd.prev: the request before
// has placed all its parts), so the member handles them in that order — a
// producer's pipelined batches of a partition stay in sequence.
func (c *proxyConn) prepare(ctx context.Context, pd *pending, g int, hdr requestHeader, req kmsg.Request) *preparedCall {
	if pd != nil && pd.prev != nil {
		select {
		case <-pd.prev:
		case <-ctx.Done():
			return &preparedCall{err: ctx.Err()}
		}
	}
	leader := c.p.opts.Leader(g)
	// A group being led anew (a failover takes a second or two) is waited
	// for rather than failed at once.
	for deadline := time.Now().Add(leaderWait); leader == 0 && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(50 * time.Millisecond)
		leader = c.p.opts.Leader(g)
	}
	if leader == 0 {
		return &preparedCall{err: errNoLeader}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[leader]
	if st == nil {
		st = &proxyStream{id: c.p.streams.Add(1)}
		c.streams[leader] = st
	}
	st.seq++
	return &preparedCall{leader: leader, st: st, hdr: hdr, req: req,
		f: Forwarded{Stream: st.id, Seq: st.seq, Principal: *c.principal.Load(), ClientAddr: c.nc.RemoteAddr().String(),
			ClientID: hdr.ClientID, Key: hdr.Key, Version: hdr.Version, Body: req.AppendTo(nil)}}
}

// send forwards a prepared request and decodes the answer into a response
// (nil: none expected, or the member closed the request: ans.Close).
func (c *proxyConn) send(ctx context.Context, pc *preparedCall) (kmsg.Response, ForwardAnswer, error) {
	if pc.err != nil {
		return nil, ForwardAnswer{}, pc.err
	}
	sent := time.Now()
	ans, err := c.p.opts.Forward(ctx, pc.leader, pc.f)
	if err != nil {
		c.log.Debug("forwarding failed", "api", kmsg.NameForKey(pc.f.Key), "to", pc.leader, "took", time.Since(sent), "err", err)
		// What follows on this stream would wait for this request: the
		// next requests start a new one.
		c.mu.Lock()
		if c.streams[pc.leader] == pc.st {
			delete(c.streams, pc.leader)
		}
		c.mu.Unlock()
		return nil, ans, err
	}
	if ans.Principal != "" {
		c.principal.Store(&ans.Principal)
	}
	if ans.Groups != nil {
		c.p.cache.learn(ans.Groups)
	}
	if len(ans.Body) == 0 {
		return nil, ans, nil
	}
	resp := pc.req.ResponseKind()
	resp.SetVersion(pc.hdr.Version)
	if err := resp.ReadFrom(ans.Body); err != nil {
		return nil, ans, fmt.Errorf("kafka proxy: a member's %s answer: %w", kmsg.NameForKey(pc.hdr.Key), err)
	}
	return resp, ans, nil
}

// forward prepares and sends a request to group g's leader.
func (c *proxyConn) forward(ctx context.Context, pd *pending, g int, hdr requestHeader, req kmsg.Request) (kmsg.Response, ForwardAnswer, error) {
	return c.send(ctx, c.prepare(ctx, pd, g, hdr, req))
}

// leaderWait bounds how long a request waits for its group to have a
// leader.
const leaderWait = 3 * time.Second

// errNoLeader is a group with no known leader.
var errNoLeader = errors.New("kafka proxy: the group has no leader")

// handle answers one request.
func (c *proxyConn) handle(ctx context.Context, pd *pending, req kmsg.Request) {
	defer pd.issuedAll()
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
		apiVersionsBody(resp)
		c.answer(pd, resp, false)
	case *kmsg.MetadataRequest:
		c.metadata(ctx, pd, r)
	case *kmsg.FindCoordinatorRequest:
		c.findCoordinator(pd, r)
	case *kmsg.DescribeClusterRequest:
		c.whole(ctx, pd, 0, r, func(resp kmsg.Response) { c.describeCluster(resp.(*kmsg.DescribeClusterResponse)) })
	case *kmsg.ProduceRequest:
		c.produce(ctx, pd, r)
	case *kmsg.FetchRequest:
		c.fetch(ctx, pd, r)
	case *kmsg.ListOffsetsRequest:
		c.listOffsets(ctx, pd, r)
	case *kmsg.OffsetForLeaderEpochRequest:
		c.offsetForLeaderEpoch(ctx, pd, r)
	case *kmsg.OffsetCommitRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.OffsetFetchRequest:
		c.offsetFetch(ctx, pd, r)
	case *kmsg.JoinGroupRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.HeartbeatRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.LeaveGroupRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.SyncGroupRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.OffsetDeleteRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.ShareGroupHeartbeatRequest:
		c.whole(ctx, pd, c.coordinator(r.GroupID), r, nil)
	case *kmsg.AlterShareGroupOffsetsRequest:
		c.whole(ctx, pd, c.coordinator(r.GroupID), r, nil)
	case *kmsg.DeleteShareGroupOffsetsRequest:
		c.whole(ctx, pd, c.coordinator(r.GroupID), r, nil)
	case *kmsg.ShareGroupDescribeRequest: // clients send one per coordinator
		g := 0
		if len(r.GroupIDs) > 0 {
			g = c.coordinator(r.GroupIDs[0])
		}
		c.whole(ctx, pd, g, r, nil)
	case *kmsg.DescribeShareGroupOffsetsRequest:
		g := 0
		if len(r.Groups) > 0 {
			g = c.coordinator(r.Groups[0].GroupID)
		}
		c.whole(ctx, pd, g, r, nil)
	case *kmsg.TxnOffsetCommitRequest:
		c.whole(ctx, pd, c.coordinator(r.Group), r, nil)
	case *kmsg.InitProducerIDRequest:
		g := 0
		if r.TransactionalID != nil {
			g = c.coordinator(*r.TransactionalID)
		}
		c.whole(ctx, pd, g, r, nil)
	case *kmsg.AddPartitionsToTxnRequest:
		g := 0
		if len(r.Transactions) > 0 {
			g = c.coordinator(r.Transactions[0].TransactionalID)
		} else {
			g = c.coordinator(r.TransactionalID)
		}
		c.whole(ctx, pd, g, r, nil)
	case *kmsg.AddOffsetsToTxnRequest:
		c.whole(ctx, pd, c.coordinator(r.TransactionalID), r, nil)
	case *kmsg.EndTxnRequest:
		c.whole(ctx, pd, c.coordinator(r.TransactionalID), r, nil)
	case *kmsg.DescribeGroupsRequest:
		c.describeGroups(ctx, pd, r)
	case *kmsg.ListGroupsRequest:
		c.listGroups(ctx, pd, r)
	default:
		c.whole(ctx, pd, 0, req, nil)
	}
}

// coordinator is the group coordinating a consumer group or transactional
// id (Kafka's hash of the id over the groups the cluster was made with).
func (c *proxyConn) coordinator(key string) int {
	return broker.KeyPartition(key, max(c.p.opts.MadeGroups(), 1))
}

// whole forwards a request whole to group g's leader and answers with its
// response, rewritten by fix when set.
func (c *proxyConn) whole(ctx context.Context, pd *pending, g int, req kmsg.Request, fix func(kmsg.Response)) {
	pc := c.prepare(ctx, pd, g, pd.hdr, req)
	pd.issuedAll()
	resp, ans, err := c.send(ctx, pc)
	switch {
	case err != nil:
		c.failed(pd, req, err)
	case resp == nil:
		if ans.Close {
			c.answer(pd, nil, true)
			return
		}
		close(pd.done) // acks=0
	default:
		if fix != nil {
			fix(resp)
		}
		pd.resp, pd.close = resp.AppendTo(nil), ans.Close
		close(pd.done)
	}
}

// failed answers a request that could not be forwarded with the
// retriable error its API has for an unreachable leader or coordinator
// (errorResponse), so the client looks the cluster up again.
func (c *proxyConn) failed(pd *pending, req kmsg.Request, err error) {
	c.log.Debug("forwarding failed", "api", kmsg.NameForKey(pd.hdr.Key), "err", err)
	resp := errorResponse(req, kerr.CoordinatorNotAvailable.Code)
	if resp == nil {
		c.answer(pd, nil, true) // no way to say it: the client reconnects
		return
	}
	c.answer(pd, resp, false)
}
