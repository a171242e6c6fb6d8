package pulsar

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// ServerVersion is what CONNECTED tells clients.
const ServerVersion = "Rosetta"

// maxProtocolVersion is the newest protocol version served (v20: topic
// migration; v17: ack receipts; v16/v18: broker entry metadata).
const maxProtocolVersion = 20

// conn is one client connection: a reader goroutine (serve) that decodes
// and handles commands in order, and a writer goroutine that sends the
// frames handlers and dispatchers queue.
type conn struct {
	s      *Server
	nc     net.Conn
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	out    chan []byte

	// Set by CONNECT.
	version      int32
	entryMeta    bool // the client reads broker entry metadata
	clientName   string
	connectedYet bool
	principal    security.Principal

	mu        sync.Mutex
	producers map[uint64]*producer
	consumers map[uint64]*consumer
	// closed: consumers the broker closed (a seek, a reset), until the
	// client subscribes them again.
	closed map[uint64]*subBase
}

func newConn(ctx context.Context, s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(ctx)
	return &conn{s: s, nc: nc, log: s.log.With("remote", nc.RemoteAddr().String()), ctx: ctx, cancel: cancel,
		out: make(chan []byte, 256), producers: map[uint64]*producer{}, consumers: map[uint64]*consumer{}}
}

// serve runs the connection until the client leaves, a protocol error
// ends it or the server stops.
func (c *conn) serve() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.writeLoop()
	}()
	go func() {
		<-c.ctx.Done()
		_ = c.nc.Close()
	}()
	err := c.readLoop()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
		c.log.Info("pulsar connection closed", "err", err)
	}
	c.cancel()
	c.closeAll()
	wg.Wait()
}

// closeAll drops the connection's producers and consumers.
func (c *conn) closeAll() {
	c.mu.Lock()
	ps, cs := c.producers, c.consumers
	c.producers, c.consumers = map[uint64]*producer{}, map[uint64]*consumer{}
	c.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
	for _, co := range cs {
		co.close()
	}
}

// readLoop reads frames and handles them in order.
func (c *conn) readLoop() error {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var size [4]byte
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.opts.KeepAlive))
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > MaxFrameSize || n < 4 {
			return fmt.Errorf("%w: frame of %d bytes (at most %d)", ErrBadFrame, n, MaxFrameSize)
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		f, err := DecodeFrame(buf)
		if err != nil {
			if errors.Is(err, ErrChecksum) && f.Command.GetType() == pulsarpb.BaseCommand_SEND {
				s := f.Command.GetSend()
				c.sendError(s.GetProducerId(), s.GetSequenceId(), pulsarpb.ServerError_ChecksumError, err.Error())
				continue
			}
			return err
		}
		if err := c.handle(&f); err != nil {
			return err
		}
	}
}

// writeLoop sends queued frames, flushing when the queue runs dry.
func (c *conn) writeLoop() {
	w := bufio.NewWriterSize(c.nc, 64<<10)
	for {
		select {
		case <-c.ctx.Done():
			return
		case f := <-c.out:
			// A client that stops reading is dropped, so dispatchers
			// waiting to queue its frames never wait for ever.
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.KeepAlive))
			if _, err := w.Write(f); err != nil {
				c.cancel()
				return
			}
			if len(c.out) == 0 {
				if err := w.Flush(); err != nil {
					c.cancel()
					return
				}
			}
		}
	}
}

// send queues a frame; false once the connection is gone.
func (c *conn) send(frame []byte) bool {
	select {
	case c.out <- frame:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// command queues a simple command.
func (c *conn) command(cmd *pulsarpb.BaseCommand) bool {
	f, err := AppendCommand(nil, cmd)
	if err != nil {
		c.log.Error("pulsar: encoding a command", "type", cmd.GetType(), "err", err)
		return false
	}
	return c.send(f)
}

// handle dispatches one command.
func (c *conn) handle(f *Frame) error {
	cmd := f.Command
	if !c.connectedYet && cmd.GetType() != pulsarpb.BaseCommand_CONNECT {
		return fmt.Errorf("%w: %s before CONNECT", ErrBadFrame, cmd.GetType())
	}
	switch cmd.GetType() {
	case pulsarpb.BaseCommand_CONNECT:
		return c.handleConnect(cmd.GetConnect())
	case pulsarpb.BaseCommand_PING:
		c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PONG.Enum(), Pong: &pulsarpb.CommandPong{}})
	case pulsarpb.BaseCommand_PONG:
	case pulsarpb.BaseCommand_LOOKUP:
		c.handleLookup(cmd.GetLookupTopic())
	case pulsarpb.BaseCommand_PARTITIONED_METADATA:
		c.handlePartitionedMetadata(cmd.GetPartitionMetadata())
	case pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		c.handleTopicsOfNamespace(cmd.GetGetTopicsOfNamespace())
	case pulsarpb.BaseCommand_GET_SCHEMA:
		c.handleGetSchema(cmd.GetGetSchema())
	case pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA:
		c.handleGetOrCreateSchema(cmd.GetGetOrCreateSchema())
	case pulsarpb.BaseCommand_PRODUCER:
		c.handleProducer(cmd.GetProducer())
	case pulsarpb.BaseCommand_SEND:
		c.handleSend(cmd.GetSend(), f)
	case pulsarpb.BaseCommand_CLOSE_PRODUCER:
		c.handleCloseProducer(cmd.GetCloseProducer())
	case pulsarpb.BaseCommand_SUBSCRIBE:
		c.handleSubscribe(cmd.GetSubscribe())
	case pulsarpb.BaseCommand_FLOW:
		c.handleFlow(cmd.GetFlow())
	case pulsarpb.BaseCommand_ACK:
		c.handleAck(cmd.GetAck())
	case pulsarpb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		c.handleRedeliver(cmd.GetRedeliverUnacknowledgedMessages())
	case pulsarpb.BaseCommand_SEEK:
		c.handleSeek(cmd.GetSeek())
	case pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID:
		c.handleLastMessageID(cmd.GetGetLastMessageId())
	case pulsarpb.BaseCommand_UNSUBSCRIBE:
		c.handleUnsubscribe(cmd.GetUnsubscribe())
	case pulsarpb.BaseCommand_CLOSE_CONSUMER:
		c.handleCloseConsumer(cmd.GetCloseConsumer())
	case pulsarpb.BaseCommand_AUTH_RESPONSE:
		// Credentials are checked at CONNECT; refreshes are accepted.
	case pulsarpb.BaseCommand_TC_CLIENT_CONNECT_REQUEST:
		r := cmd.GetTcClientConnectRequest()
		c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_TC_CLIENT_CONNECT_RESPONSE.Enum(),
			TcClientConnectResponse: &pulsarpb.CommandTcClientConnectResponse{RequestId: proto.Uint64(r.GetRequestId()),
				Error: pulsarpb.ServerError_NotAllowedError.Enum(), Message: proto.String("transactions are not supported")}})
	default:
		c.log.Info("pulsar: unsupported command", "type", cmd.GetType().String())
		if id, ok := requestID(cmd); ok {
			c.errorReply(id, pulsarpb.ServerError_NotAllowedError, "command "+cmd.GetType().String()+" is not supported")
		}
	}
	return nil
}

// requestID finds the request id of commands answered with ERROR.
func requestID(cmd *pulsarpb.BaseCommand) (uint64, bool) {
	m := cmd.ProtoReflect()
	var id uint64
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		inner := v.Message()
		if f := inner.Descriptor().Fields().ByName("request_id"); f != nil && inner.Has(f) {
			id, found = inner.Get(f).Uint(), true
			return false
		}
		return true
	})
	return id, found
}

// handleConnect answers CONNECT with CONNECTED.
func (c *conn) handleConnect(m *pulsarpb.CommandConnect) error {
	if c.connectedYet {
		return fmt.Errorf("%w: a second CONNECT", ErrBadFrame)
	}
	c.connectedYet = true
	p, err := c.authenticate(m)
	if err != nil {
		c.log.Warn("pulsar authentication failed", "method", m.GetAuthMethodName(), "err", err)
		c.errorReply(0, pulsarpb.ServerError_AuthenticationError, err.Error())
		return err
	}
	c.principal = p
	c.version = min(m.GetProtocolVersion(), maxProtocolVersion)
	c.entryMeta = m.GetFeatureFlags().GetSupportsBrokerEntryMetadata()
	c.clientName = m.GetClientVersion()
	c.log = c.log.With("client", c.clientName)
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECTED.Enum(), Connected: &pulsarpb.CommandConnected{
		ServerVersion:   proto.String(ServerVersion),
		ProtocolVersion: proto.Int32(c.version),
		MaxMessageSize:  proto.Int32(int32(c.s.opts.MaxMessageSize)),
		FeatureFlags:    &pulsarpb.FeatureFlags{SupportsBrokerEntryMetadata: proto.Bool(true)},
	}})
	return nil
}

// errorReply answers a request with ERROR.
func (c *conn) errorReply(requestID uint64, code pulsarpb.ServerError, msg string) {
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ERROR.Enum(), Error: &pulsarpb.CommandError{
		RequestId: proto.Uint64(requestID), Error: code.Enum(), Message: proto.String(msg)}})
}

// success answers a request with SUCCESS.
func (c *conn) success(requestID uint64) {
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{
		RequestId: proto.Uint64(requestID)}})
}

// sendError answers a SEND with SEND_ERROR.
func (c *conn) sendError(producerID, seq uint64, code pulsarpb.ServerError, msg string) {
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_ERROR.Enum(), SendError: &pulsarpb.CommandSendError{
		ProducerId: proto.Uint64(producerID), SequenceId: proto.Uint64(seq), Error: code.Enum(), Message: proto.String(msg)}})
}
