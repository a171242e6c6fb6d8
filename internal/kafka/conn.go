package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/task"
)

// conn is one client connection: a reader, a processor and a writer.
type conn struct {
	s        *Server
	nc       net.Conn
	listener Listener
	auth     connAuth
	home     home   // where short topic names resolve (the principal's namespace)
	release  func() // uncounts the connection from its connection quotas
	log      *slog.Logger
	reqs     chan *request
	resps    chan *request
	ctx      context.Context
	cancel   context.CancelFunc
	// gone ends when the client stops sending (its connection closed):
	// waits that only serve an answer, such as a parked fetch, end with it.
	gone context.Context
	// handling and awaiting are the API keys (plus one; 0: none) of the
	// request being handled and of the answer waiting for durability, for
	// the log of a stopping connection slow to finish.
	handling, awaiting atomic.Int32
}

// request is one request moving through the connection.
type request struct {
	hdr   requestHeader
	body  []byte
	frame []byte // a pooled frame to recycle once handled
	size  int64  // bytes reserved from the budget
	reply reply
}

// reply is a handler's answer.
type reply struct {
	resp kmsg.Response
	// await, when set, runs in the writer before resp is encoded: it waits
	// for the durability the client asked for and may set error codes.
	await func()
	// none means the client expects no response (produce with acks=0).
	none bool
	// closeConn asks for the connection to be closed after this request.
	closeConn bool
	// closeAfter closes the connection once this response is written
	// (a failed authentication's answer reaches the client first).
	closeAfter bool
	// throttle mutes the connection this long after the response is sent
	// (KIP-219: the client is told the same time and waits it out too).
	throttle time.Duration
}

// defaultIdleTimeout closes a connection that sends nothing for this long
// (Kafka's connections.max.idle.ms default); clients reconnect on demand.
const defaultIdleTimeout = 10 * time.Minute

func newConn(s *Server, nc net.Conn, l Listener) *conn {
	return &conn{
		s: s, nc: nc, listener: l,
		log:   s.log.With("client", nc.RemoteAddr().String()),
		reqs:  make(chan *request, s.opts.MaxInflightPerConn),
		resps: make(chan *request, s.opts.MaxInflightPerConn),
	}
}

func (c *conn) serve(ctx context.Context) {
	c.ctx, c.cancel = context.WithCancel(ctx)
	defer c.cancel()
	var clientGone context.CancelFunc
	c.gone, clientGone = context.WithCancel(c.ctx)
	defer clientGone()
	defer c.endAuth()
	defer func() {
		if c.release != nil {
			c.release()
		}
	}()
	if !c.startAuth() {
		c.nc.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { c.process(); done <- struct{}{} }()
	go func() { c.write(); done <- struct{}{} }()
	c.read()
	// The client is gone (or sent what closes the connection): the requests
	// already read are still handled (an acks=0 produce is appended), but a
	// fetch parked for its MaxWait answers now rather than holding the
	// connection for nobody.
	clientGone()
	close(c.reqs)
	if task.Draining(c.ctx) {
		slow := time.AfterFunc(time.Second, func() {
			c.log.Info("a stopping connection is still answering what it read", "handling", apiName(c.handling.Load()), "awaiting", apiName(c.awaiting.Load()))
		})
		defer slow.Stop()
	}
	<-done
	<-done
	c.nc.Close()
	c.s.closeShareSessions(c)
}

// apiName names an API key stored plus one ("" for none).
func apiName(k int32) string {
	if k == 0 {
		return ""
	}
	return kmsg.NameForKey(int16(k - 1))
}

// read frames requests. A frame's size is checked before anything is
// allocated, and its bytes are reserved from the broker-wide budget.
func (c *conn) read() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var sizeBuf [4]byte
	for {
		err := task.AwaitRequest(c.nc, r, c.s.opts.IdleTimeout)
		if err == nil {
			task.RequestDeadline(c.nc, 4, c.s.opts.FrameTimeout)
			_, err = io.ReadFull(r, sizeBuf[:])
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !task.Draining(c.ctx) {
				c.log.Info("closing connection: idle or a request too slow to arrive", "idle_limit", c.s.opts.IdleTimeout)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
				c.log.Debug("read failed", "err", err)
			}
			return
		}
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		if size < 10 || size > c.s.opts.MaxFrameBytes {
			c.log.Warn("closing connection: bad frame size", "size", size, "limit", c.s.opts.MaxFrameBytes)
			return
		}
		// Up to a MiB, the frame's budget is taken whole before it is read;
		// a larger frame takes budget as its bytes arrive.
		if size <= maxUpFrontFrame && !c.s.budget.Acquire(int64(size), c.ctx.Done()) {
			return
		}
		task.RequestDeadline(c.nc, int(size), c.s.opts.FrameTimeout)
		// Peek at the API key: produce frames come from the pool.
		pooled := false
		if key, err := r.Peek(2); err == nil && key[0] == 0 && key[1] == produceKey {
			pooled = true
		}
		var frame []byte
		switch {
		case size > maxUpFrontFrame:
			// A larger frame grows (doubling) as its bytes
			// arrive: a peer announcing a huge frame and sending little of
			// it costs, and holds of the budget, what it sent. Produce
			// frames grow through the pool.
			var bufs task.FrameBuffers
			if pooled {
				// From what has arrived already (up to a MiB, as
				// the up-front rule allows anyway), so a peer that
				// announces a large produce and stops holds no more.
				bufs = task.FrameBuffers{First: min(maxUpFrontFrame, max(minPooledFrame, r.Buffered())), Get: c.s.frames.get, Put: c.s.frames.put}
			}
			frame, err = task.ReadFrameWithin(r, int(size), c.s.budget, c.ctx.Done(), bufs)
			if err != nil {
				return // (it holds nothing)
			}
		case pooled:
			frame = c.s.frames.get(int(size))
			_, err = io.ReadFull(r, frame)
		default:
			frame = make([]byte, size)
			_, err = io.ReadFull(r, frame)
		}
		if err != nil {
			if pooled {
				c.s.frames.put(frame)
			}
			c.s.budget.Release(int64(size))
			return
		}
		hdr, body, err := parseRequestHeader(frame, flexibleRequest)
		if err != nil {
			c.s.budget.Release(int64(size))
			c.log.Warn("closing connection: malformed request header", "err", err)
			return
		}
		req := &request{hdr: hdr, body: body, size: int64(size)}
		if pooled {
			req.frame = frame
		}
		select {
		case c.reqs <- req:
		case <-c.ctx.Done():
			c.s.budget.Release(int64(size))
			return
		}
	}
}

// maxUpFrontFrame is the largest frame allocated whole before its bytes
// arrive.
const maxUpFrontFrame = 1 << 20

// process runs handlers in request order.
func (c *conn) process() {
	defer close(c.resps)
	for req := range c.reqs {
		c.handling.Store(int32(req.hdr.Key) + 1)
		req.reply = c.dispatch(req)
		c.handling.Store(0)
		req.body = nil
		if req.frame != nil {
			c.s.frames.put(req.frame)
			req.frame = nil
		}
		c.s.budget.Release(req.size)
		if req.reply.closeConn {
			c.nc.Close()
		}
		throttle := req.reply.throttle
		select {
		case c.resps <- req:
		case <-c.ctx.Done():
		}
		if throttle > 0 {
			t := time.NewTimer(throttle)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
			}
		}
		if req.reply.closeConn || req.reply.closeAfter {
			for r := range c.reqs { // drain what the reader already queued
				c.s.budget.Release(r.size)
			}
			return
		}
	}
}

// write sends responses in request order, batching what is ready.
func (c *conn) write() {
	defer c.cancel()
	w := bufio.NewWriterSize(c.nc, 64<<10)
	var buf []byte
	for req := range c.resps {
		if req.reply.await != nil {
			c.awaiting.Store(int32(req.hdr.Key) + 1)
			req.reply.await()
			c.awaiting.Store(0)
		}
		if req.reply.resp != nil && !req.reply.none {
			if need := responseSizeHint(req.reply.resp); need > cap(buf) {
				buf = make([]byte, 0, need)
			}
			buf = encodeResponse(buf[:0], req.hdr, req.reply.resp)
			_ = c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := w.Write(buf); err != nil {
				c.drain()
				return
			}
		}
		if len(c.resps) == 0 || req.reply.closeAfter {
			if err := w.Flush(); err != nil {
				c.drain()
				return
			}
		}
		if req.reply.closeAfter {
			c.drain()
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
	_ = w.Flush()
}

func (c *conn) drain() {
	c.nc.Close()
	for req := range c.resps {
		if req.reply.await != nil {
			req.reply.await()
		}
	}
}

// responseSizeHint is about the encoded size of a response carrying
// records (0 for others), so that its buffer is allocated once rather than
// grown through copies of every record.
func responseSizeHint(resp kmsg.Response) int {
	f, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return 0
	}
	n := 64
	for i := range f.Topics {
		n += 64 + len(f.Topics[i].Topic)
		for j := range f.Topics[i].Partitions {
			p := &f.Topics[i].Partitions[j]
			n += 64 + len(p.RecordBatches) + 24*len(p.AbortedTransactions)
		}
	}
	return n
}

// encodeResponse frames a response: size, header, body. ApiVersions always
// uses response header v0 (KIP-511).
func encodeResponse(dst []byte, hdr requestHeader, resp kmsg.Response) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = appendResponseHeader(dst, hdr.CorrelationID, resp.IsFlexible() && hdr.Key != apiVersionsKey)
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}

// dispatch decodes the body and runs the handler for the request's key.
func (c *conn) dispatch(req *request) reply {
	h := lookupHandler(req.hdr.Key)
	if h == nil {
		c.log.Warn("closing connection: unknown API key", "api", req.hdr.Key, "version", req.hdr.Version, "client_id", req.hdr.ClientID)
		return reply{closeConn: true}
	}
	if !c.admitRequest(req.hdr.Key) {
		return reply{closeConn: true}
	}
	if req.hdr.Version < h.min || req.hdr.Version > h.max {
		if req.hdr.Key == apiVersionsKey {
			return reply{resp: apiVersionsDowngrade()}
		}
		c.log.Warn("closing connection: unsupported API version", "api", kmsg.NameForKey(req.hdr.Key),
			"version", req.hdr.Version, "supported", [2]int16{h.min, h.max}, "client_id", req.hdr.ClientID)
		return reply{closeConn: true}
	}
	if req.hdr.Key != apiVersionsKey && c.s.cat() == nil {
		// A cluster member that has served no replication group yet (just
		// started) has no catalog to answer from: the client (or the
		// protocol-only node forwarding for it) tries again.
		c.log.Info("closing connection: no replication group is served here yet", "api", kmsg.NameForKey(req.hdr.Key))
		return reply{closeConn: true}
	}
	kreq := kmsg.RequestForKey(req.hdr.Key)
	kreq.SetVersion(req.hdr.Version)
	if err := kreq.ReadFrom(req.body); err != nil {
		c.log.Warn("closing connection: malformed request", "api", kmsg.NameForKey(req.hdr.Key), "version", req.hdr.Version, "err", err)
		return reply{closeConn: true}
	}
	rc := &reqCtx{conn: c, hdr: req.hdr}
	if obs := c.s.opts.ObserveRequest; obs != nil {
		start := time.Now()
		defer func() { obs(kmsg.NameForKey(req.hdr.Key), time.Since(start)) }()
	}
	return h.fn(rc, kreq)
}

// reqCtx is what a handler gets besides its request.
type reqCtx struct {
	conn *conn
	hdr  requestHeader
}

func (r *reqCtx) ctx() context.Context { return r.conn.ctx }

// waitCtx bounds waits that only serve the answer: it also ends when the
// client goes away.
func (r *reqCtx) waitCtx() context.Context {
	if r.conn.gone == nil { // a connection not served by serve (tests)
		return r.conn.ctx
	}
	return r.conn.gone
}
func (r *reqCtx) srv() *Server { return r.conn.s }

// flexibleRequest reports whether a request uses header v2.
func flexibleRequest(key, version int16) bool {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return false
	}
	req.SetVersion(version)
	return req.IsFlexible()
}
