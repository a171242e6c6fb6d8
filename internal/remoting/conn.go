package remoting

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
	"github.com/rosettamq/rosetta/internal/task"
)

// conn is one client connection: a reader that hands each request to a
// worker (bounded in-flight requests; workers are started as concurrency
// needs them and live as long as the connection, so their grown stacks are
// reused), and a writer that sends responses as they finish.
type conn struct {
	s      *Server
	nc     net.Conn
	log    *slog.Logger
	remote string                   // the client's address
	store  string                   // the address this node is known by on this connection
	ids    protocol.MessageIDPrefix // store's part of offset message ids
	out    chan *protocol.Command
	slots  chan struct{} // in-flight bound
	work   chan inbound  // to an idle worker
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup                   // workers
	callMu sync.Mutex                       // guards calls
	calls  map[int32]chan *protocol.Command // server-initiated requests awaiting the client's answer, by opaque
}

// reqCtx is what a handler knows of its request's connection.
type reqCtx struct {
	conn      *conn
	ctx       context.Context
	principal security.Principal // who the request proved to be
}

func newConn(s *Server, nc net.Conn) *conn {
	nc = task.NewLingerConn(nc, s.opts.ReadLinger, lingerBatch)
	store, remote := s.advertised(nc.LocalAddr(), nc.RemoteAddr()), nc.RemoteAddr().String()
	return &conn{s: s, nc: nc, log: s.log.With("client", remote), remote: remote,
		store: store, ids: protocol.OffsetMessageIDPrefix(store),
		out: make(chan *protocol.Command, s.opts.MaxInflightPerConn), slots: make(chan struct{}, s.opts.MaxInflightPerConn),
		work: make(chan inbound)}
}

func (c *conn) serve(ctx context.Context) {
	c.ctx, c.cancel = context.WithCancel(broker.WithTraceSource(ctx, "remoting", c.remote))
	defer c.cancel()
	done := make(chan struct{})
	go func() { c.write(); close(done) }()
	c.read()
	c.cancel()
	c.wg.Wait()
	<-done
	c.nc.Close()
	for _, g := range c.s.clients.dropConn(c) {
		c.s.notifyChanged(g, c)
	}
}

// sendOneway queues a server-initiated one-way request (dropped if the
// connection is closing or its queue is full: the client heartbeats and
// rebalances periodically anyway).
func (c *conn) sendOneway(cmd *protocol.Command) {
	cmd.Opaque = c.s.opaque.Add(1)
	cmd.Flag |= protocol.FlagOneway
	if c.ctx == nil || c.ctx.Err() != nil {
		return
	}
	select {
	case c.out <- cmd:
	default:
	}
}

// lingerBatch is what a lingering read waits for (unless the linger ends
// first): about thirty small sends.
const lingerBatch = 16 << 10

// defaultIdleTimeout closes a connection that sends nothing for this long
// (RocketMQ's serverChannelMaxIdleTimeSeconds); clients heartbeat every
// 30 s.
const defaultIdleTimeout = 120 * time.Second

// read frames requests: a frame's size is checked before anything is
// allocated, and a malformed frame closes the connection (as RocketMQ
// does), with a log line.
func (c *conn) read() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var lenBuf [4]byte
	var sends []inbound // read, holding slots, not yet dispatched
	defer func() { c.releaseAll(sends) }()
	for {
		if len(sends) > 0 && !c.smallFrameWaiting(r) {
			// Nothing more to gather without waiting (the frame after
			// them was not a send, or answered a request of ours).
			c.dispatch(inbound{batch: sends})
			sends = nil
		}
		idle := c.s.opts.IdleTimeout
		if c.ctx.Err() != nil {
			idle = time.Second // the writer stopped: drain what already arrived, briefly
		}
		err := task.AwaitRequest(c.nc, r, idle)
		if err == nil {
			if r.Buffered() < len(lenBuf) { // (no read, no deadline, when it is all here)
				task.RequestDeadline(c.nc, 4, c.s.opts.FrameTimeout)
			}
			_, err = io.ReadFull(r, lenBuf[:])
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && c.ctx.Err() == nil {
				c.log.Info("closing connection: idle or a request too slow to arrive", "idle_limit", c.s.opts.IdleTimeout)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
				c.log.Debug("read failed", "err", err)
			}
			return
		}
		size := protocol.FrameLength(lenBuf)
		if lc, ok := c.nc.(*task.LingerConn); ok {
			lc.Request()
		}
		if size < 4 || size > int(c.s.opts.MaxFrameBytes) {
			c.log.Warn("closing connection: bad frame size", "size", size, "limit", c.s.opts.MaxFrameBytes)
			return
		}
		in, ok := c.readRequest(r, size)
		if !ok {
			return
		}
		if in.req == nil { // an answer to a server-initiated request
			if in.resp != nil {
				c.answered(in.resp)
			}
			c.s.opts.Budget.Release(in.size)
			continue
		}
		if isSend(in.req.Code) && (len(sends) > 0 || c.smallFrameWaiting(r)) {
			// Sends already here wait for the ones behind them and run
			// together, stored in one append.
			select {
			case c.slots <- struct{}{}:
				sends = append(sends, in)
				if len(sends) < sendBatchMax && c.smallFrameWaiting(r) {
					continue
				}
				in = inbound{batch: sends}
				sends = nil
			default: // the bound is reached: what is held goes first
				if len(sends) > 0 {
					c.dispatch(inbound{batch: sends})
					sends = nil
				}
				if !c.takeSlot(in) {
					return
				}
			}
			c.dispatch(in)
			continue
		}
		if len(sends) > 0 {
			c.dispatch(inbound{batch: sends})
			sends = nil
		}
		if in.req.Code == protocol.UpdateConsumerOffset {
			// One-way offset updates apply in the order sent (a later
			// update is never overtaken by an earlier one), and even
			// when the connection is going away: a client shutting down
			// sends its last offsets and closes at once.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 5*time.Second)
			c.handleWith(ctx, in.req)
			cancel()
			c.s.opts.Budget.Release(in.size)
			continue
		}
		if !c.takeSlot(in) {
			return
		}
		c.dispatch(in)
	}
}

// takeSlot waits for an in-flight slot for in; false when the connection
// ends first (in's budget is released).
func (c *conn) takeSlot(in inbound) bool {
	select {
	case c.slots <- struct{}{}:
		return true
	case <-c.ctx.Done():
		c.s.opts.Budget.Release(in.size)
		return false
	}
}

// dispatch hands a request (or a batch of sends), holding its slots, to
// an idle worker or a new one.
func (c *conn) dispatch(in inbound) {
	select {
	case c.work <- in: // an idle worker takes it
	default:
		c.wg.Add(1)
		go c.worker(in)
	}
}

// releaseAll gives back the budget and slots of sends never dispatched.
func (c *conn) releaseAll(sends []inbound) {
	for _, in := range sends {
		c.s.opts.Budget.Release(in.size)
		<-c.slots
	}
}

// Send batches: sends of one connection already read are handled
// together (one storage append) while the next frame is a small one
// already here, up to sendBatchMax of them.
const (
	sendBatchMax   = 32
	sendBatchFrame = 64 << 10
)

// isSend says whether a request code is a producer's send.
func isSend(code int32) bool {
	return code == protocol.SendMessage || code == protocol.SendMessageV2 || code == protocol.SendBatchMessage
}

// smallFrameWaiting says whether a whole frame of at most sendBatchFrame
// bytes is buffered in r and the request budget has room for it now.
func (c *conn) smallFrameWaiting(r *bufio.Reader) bool {
	if r.Buffered() < 4 {
		return false
	}
	b, err := r.Peek(4)
	if err != nil {
		return false
	}
	size := protocol.FrameLength([4]byte(b))
	return size >= 4 && size <= sendBatchFrame && r.Buffered() >= 4+size && c.s.opts.Budget.Available() >= int64(size)
}

// inbound is a request read off the connection, with the budget bytes its
// frame holds until it is handled.
type inbound struct {
	req   *protocol.Command
	resp  *protocol.Command // a client's answer to a request of ours
	size  int64
	batch []inbound // sends handled together (req is nil)
}

// readRequest reads and decodes a frame of size bytes, taking its budget
// as the bytes arrive (held until the request is handled); a response
// frame gives a nil request. false: the connection must close (holding
// nothing).
func (c *conn) readRequest(r *bufio.Reader, size int) (inbound, bool) {
	if r.Buffered() < size {
		task.RequestDeadline(c.nc, size, c.s.opts.FrameTimeout)
	}
	frame, err := task.ReadFrameWithin(r, size, c.s.opts.Budget, c.ctx.Done(), task.FrameBuffers{})
	if err != nil {
		return inbound{}, false
	}
	req, err := protocol.Decode(frame)
	if err != nil {
		c.s.opts.Budget.Release(int64(size))
		c.log.Warn("closing connection: malformed frame", "err", err)
		return inbound{}, false
	}
	if req.IsResponse() {
		return inbound{resp: req, size: int64(size)}, true
	}
	return inbound{req: req, size: int64(size)}, true
}

// worker runs requests, the first and then whatever the reader hands it,
// until the connection ends.
func (c *conn) worker(in inbound) {
	defer c.wg.Done()
	for {
		if in.batch != nil {
			c.handleSends(in.batch)
			c.releaseAll(in.batch)
		} else {
			c.handle(in.req)
			c.s.opts.Budget.Release(in.size)
			<-c.slots
		}
		select {
		case in = <-c.work:
		case <-c.ctx.Done():
			return
		}
	}
}

// codeNames are the decimal names of request codes below 1024 (the
// metrics' label), made once.
var codeNames = func() (names [1024]string) {
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	return names
}()

func codeName(code int32) string {
	if code >= 0 && int(code) < len(codeNames) {
		return codeNames[code]
	}
	return strconv.Itoa(int(code))
}

// handle runs one request and queues its answer.
func (c *conn) handle(req *protocol.Command) { c.handleWith(c.ctx, req) }

// handleWith runs one request under ctx and queues its answer.
func (c *conn) handleWith(ctx context.Context, req *protocol.Command) {
	h := c.s.handlers[req.Code]
	principal, resp := c.authorizeRequest(req)
	switch {
	case resp != nil:
	case h == nil:
		c.log.Info("unsupported request code", "code", req.Code, "language", req.Language, "version", req.Version)
		resp = unsupported(req)
	default:
		start := time.Now()
		resp = h(&reqCtx{conn: c, ctx: ctx, principal: principal}, req)
		if obs := c.s.opts.ObserveRequest; obs != nil {
			obs(codeName(req.Code), time.Since(start))
		}
		c.paceFetch(ctx, principal, req, resp)
	}
	c.answer(req, resp)
}

// answer queues resp as the answer to req (none to a one-way request).
func (c *conn) answer(req, resp *protocol.Command) {
	if resp == nil || req.IsOneway() {
		return
	}
	resp.Opaque, resp.Flag = req.Opaque, resp.Flag|protocol.FlagResponse
	select {
	case c.out <- resp:
	case <-c.ctx.Done():
	}
}

// write sends responses (and server-initiated requests), batching what is
// queued into one write, until the connection ends. The channel is never
// closed, so other connections may still queue notifications to it.
func (c *conn) write() {
	w := bufio.NewWriterSize(c.nc, 64<<10)
	var buf []byte
	for {
		var cmd *protocol.Command
		select {
		case cmd = <-c.out:
		case <-c.ctx.Done():
			return
		}
		buf = protocol.AppendFrame(buf[:0], cmd)
		_, err := w.Write(buf)
		if err == nil && len(c.out) == 0 {
			// Let requests that are about to finish queue their answers,
			// so one write carries several.
			runtime.Gosched()
			if len(c.out) == 0 {
				err = w.Flush()
			}
		}
		if err != nil {
			// The peer is gone or stuck: stop, but give the reader a
			// moment to drain what already arrived (a closing client's
			// last one-way offset updates) before it gives up.
			c.cancel()
			_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
			return
		}
	}
}
