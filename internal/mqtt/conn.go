package mqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
)

// connectTimeout bounds how long a new connection may take to send
// CONNECT.
const connectTimeout = 10 * time.Second

// conn is one network connection: a reader goroutine (serve) that
// decodes and handles packets in order; writes go out under a lock from
// it, the session's dispatcher and the acknowledger of inbound publishes.
type conn struct {
	s      *Server
	nc     net.Conn
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	// Set by CONNECT.
	version    byte
	keepAlive  time.Duration
	principal  security.Principal
	session    *session
	will       *willMessage
	maxPacket  int // the client's maximum packet size (0: none)
	receiveMax int // the client's receive maximum
	aliases    map[uint16]string
	// Topic aliases towards the client (MQTT 5): at most outAliasMax, the
	// first topics sent keeping theirs for the connection's life (c.wmu).
	outAliasMax uint16
	outAliases  map[string]uint16

	// wbuf holds packets written and not yet flushed: taken from
	// the server's writeBufs when needed and given back once flushed, so an idle
	// connection holds no write buffer.
	wmu  sync.Mutex
	wbuf *[]byte

	// Inbound QoS 1 and 2 publishes, acknowledged in order once durable.
	acks      chan pendingAck
	ackerOnce sync.Once

	graceful  atomic.Bool // DISCONNECT received: no will
	closeOnce sync.Once
}

func newConn(ctx context.Context, s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(ctx)
	return &conn{s: s, nc: nc, log: s.log.With("remote", nc.RemoteAddr().String()), ctx: ctx, cancel: cancel}
}

// serve runs the connection until the client leaves, a protocol error
// ends it or the server stops, then calls done (it may return before).
func (c *conn) serve(done func()) {
	// (no goroutine waits for the end: idle connections cost little)
	stop := context.AfterFunc(c.ctx, func() { _ = c.nc.Close() })
	r := bufio.NewReaderSize(c.nc, 1024)
	if err := c.readConnect(r); err != nil {
		c.end(err, stop, done)
		return
	}
	// The packets after CONNECT are read on a fresh goroutine, whose stack
	// starts small: this one's grew handling CONNECT, and an idle
	// connection would keep it.
	go func() { c.end(c.readLoop(r), stop, done) }()
}

// end closes the connection after its reading ended with err, then
// calls done.
func (c *conn) end(err error, stop func() bool, done func()) {
	defer done()
	defer stop()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
		c.log.Info("mqtt connection closed", "client", c.clientID(), "err", err)
		var pe *packet.Error
		if errors.As(err, &pe) && c.version == packet.V5 && c.session != nil {
			c.send(&packet.Disconnect{Code: pe.Code, Props: reason(pe.Reason)})
		}
	}
	c.cancel()
	c.finish()
}

func (c *conn) clientID() string {
	if c.session != nil {
		return c.session.clientID
	}
	return ""
}

// readConnect reads and handles CONNECT.
func (c *conn) readConnect(r *bufio.Reader) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(connectTimeout))
	h, body, err := packet.ReadPacket(r, c.s.opts.MaxPacketSize)
	if err != nil {
		return err
	}
	if h>>4 != packet.CONNECT {
		return fmt.Errorf("%w: %s before CONNECT", errProtocol, packet.TypeName(h>>4))
	}
	p, err := packet.Decode(packet.V311, h, body)
	if err != nil {
		var pe *packet.Error
		if cp, ok := p.(*packet.Connect); ok && errors.As(err, &pe) && pe.Code == packet.CodeUnsupportedVer {
			c.version = cp.Version
			c.refuse(pe.Code, 0x01, pe.Reason)
		}
		return err
	}
	return c.connect(p.(*packet.Connect))
}

// readLoop reads packets after CONNECT until the connection ends.
func (c *conn) readLoop(r *bufio.Reader) error {
	for {
		if c.keepAlive > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.keepAlive * 3 / 2))
		} else {
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		h, body, err := packet.ReadPacket(r, c.s.opts.MaxPacketSize)
		if err != nil {
			return err
		}
		p, err := packet.Decode(c.version, h, body)
		if err != nil {
			return err
		}
		start := time.Now()
		err = c.handle(p)
		if obs := c.s.opts.ObserveRequest; obs != nil {
			obs(packet.TypeName(p.Type()), time.Since(start))
		}
		if err != nil {
			return err
		}
	}
}

var errProtocol = &packet.Error{Code: packet.CodeProtocolError, Reason: "protocol error"}

// handle handles one packet after CONNECT.
func (c *conn) handle(p packet.Packet) error {
	switch p := p.(type) {
	case *packet.Publish:
		return c.handlePublish(p)
	case *packet.Ack:
		return c.handleAck(p)
	case *packet.Subscribe:
		return c.handleSubscribe(p)
	case *packet.Unsubscribe:
		return c.handleUnsubscribe(p)
	case *packet.Pingreq:
		c.send(&packet.Pingresp{})
		return nil
	case *packet.Disconnect:
		if p.Code != 0x04 { // 0x04: disconnect with will message
			c.graceful.Store(true)
		}
		if c.version == packet.V5 && p.Props.Has(packet.PropSessionExpiry) {
			if c.session.expiry == 0 && p.Props.SessionExpiry != 0 {
				return &packet.Error{Code: packet.CodeProtocolError, Reason: "session expiry set at DISCONNECT after 0 at CONNECT"}
			}
			c.session.setExpiry(time.Duration(p.Props.SessionExpiry)*time.Second, c.s.opts.MaxSessionExpiry)
		}
		return io.EOF
	case *packet.Connect:
		return &packet.Error{Code: packet.CodeProtocolError, Reason: "a second CONNECT"}
	case *packet.Auth:
		return &packet.Error{Code: packet.CodeProtocolError, Reason: "AUTH without an authentication method"}
	}
	return &packet.Error{Code: packet.CodeProtocolError, Reason: packet.TypeName(p.Type()) + " from a client"}
}

// CONNACK codes: 3.1.1's return codes and 5's reason codes.
const (
	connackBadCredentials3 = 0x04
	connackNotAuthorized3  = 0x05
	connackIDRejected3     = 0x02
	codeBadCredentials     = 0x86
	codeNotAuthorized      = 0x87
	codeIDNotValid         = 0x85
	codeBadAuthMethod      = 0x8C
)

// connect authenticates the client and attaches its session.
func (c *conn) connect(p *packet.Connect) error {
	c.version = p.Version
	c.keepAlive = time.Duration(p.KeepAlive) * time.Second
	if p.Props.Has(packet.PropAuthMethod) {
		// Enhanced authentication: no method is supported.
		c.log.Info("mqtt connection refused", "client", p.ClientID, "auth_method", p.Props.AuthMethod)
		c.refuse(codeBadAuthMethod, connackBadCredentials3, "authentication method "+p.Props.AuthMethod+" is not supported")
		return io.EOF
	}
	principal, err := c.authenticate(p)
	if err != nil {
		c.log.Info("mqtt connection refused", "client", p.ClientID, "user", p.Username, "err", err)
		c.refuse(codeBadCredentials, connackBadCredentials3, err.Error())
		return io.EOF
	}
	c.principal = principal
	id := p.ClientID
	var assigned string
	if id == "" {
		if !p.CleanStart && c.version < packet.V5 {
			c.refuse(codeIDNotValid, connackIDRejected3, "an empty client identifier needs a clean session")
			return io.EOF
		}
		id = c.s.idPrefix + "-" + strconv.FormatUint(c.s.assigned.Add(1), 10)
		assigned = id
	}
	if p.Will != nil {
		if err := validWillTopic(p.Will.Topic); err != nil {
			return err
		}
		c.will = &willMessage{publish: packet.Publish{Topic: p.Will.Topic, Payload: p.Will.Payload, QoS: p.Will.QoS,
			Retain: p.Will.Retain, Props: p.Will.Props}, delay: time.Duration(p.Will.Props.WillDelay) * time.Second,
			principal: principal, host: c.host()}
		c.will.publish.Props.WillDelay = 0
	}
	c.receiveMax = c.s.opts.MaxInflight
	if p.Props.Has(packet.PropReceiveMaximum) {
		c.receiveMax = min(c.receiveMax, int(p.Props.ReceiveMaximum))
	}
	if p.Props.Has(packet.PropMaximumPacketSize) {
		c.maxPacket = int(p.Props.MaximumPacketSize)
	}
	if p.Props.Has(packet.PropTopicAliasMaximum) {
		c.outAliasMax = p.Props.TopicAliasMaximum
	}
	// A session outlives its connection: 3.1.1 when clean session is off,
	// 5 for its session expiry interval.
	expiry := time.Duration(0)
	switch {
	case c.version < packet.V5 && !p.CleanStart:
		expiry = c.s.opts.MaxSessionExpiry
	case c.version == packet.V5:
		expiry = time.Duration(p.Props.SessionExpiry) * time.Second
	}
	ss, present := c.s.takeSession(c, id, p.CleanStart)
	ss.setExpiry(expiry, c.s.opts.MaxSessionExpiry)
	c.session = ss
	if err := ss.save(c.ctx, !present); err != nil {
		c.log.Warn("mqtt: recording a session", "client", id, "err", err)
		c.refuse(0x88, 0x03, "the session could not be recorded")
		return io.EOF
	}
	if err := c.s.recordWill(c.ctx, id, c.will); err != nil {
		c.log.Warn("mqtt: recording a will", "client", id, "err", err)
		c.refuse(0x88, 0x03, "the will could not be recorded")
		return io.EOF
	}
	ack := &packet.Connack{SessionPresent: present}
	if c.version == packet.V5 {
		pr := &ack.Props
		pr.Set(packet.PropReceiveMaximum)
		pr.ReceiveMaximum = uint16(min(c.s.opts.MaxInflight*16, 65535))
		pr.Set(packet.PropMaximumPacketSize)
		pr.MaximumPacketSize = uint32(c.s.opts.MaxPacketSize)
		pr.Set(packet.PropTopicAliasMaximum)
		pr.TopicAliasMaximum = maxTopicAliases
		pr.Set(packet.PropSharedAvailable)
		if c.s.opts.Pop == nil {
			pr.SharedAvailable = 0
		} else {
			pr.SharedAvailable = 1
		}
		if assigned != "" {
			pr.Set(packet.PropAssignedClientID)
			pr.AssignedClientID = assigned
		}
		if expiry > c.s.opts.MaxSessionExpiry {
			pr.Set(packet.PropSessionExpiry)
			pr.SessionExpiry = uint32(c.s.opts.MaxSessionExpiry / time.Second)
		}
	}
	c.send(ack)
	c.log = c.log.With("client", id)
	ss.resume(c)
	return nil
}

// maxTopicAliases is the topic alias maximum clients are told.
const maxTopicAliases = 64

// refuse answers CONNECT with a failure: code5 to MQTT 5 clients, code3
// to earlier ones.
func (c *conn) refuse(code5, code3 byte, why string) {
	ack := &packet.Connack{Code: code3}
	if c.version == packet.V5 {
		ack.Code, ack.Props = code5, reason(why)
	}
	c.send(ack)
}

// authenticate checks the user name and password against the node's
// users; a verified client certificate names the principal when there are
// none.
func (c *conn) authenticate(p *packet.Connect) (security.Principal, error) {
	sec := c.s.opts.Security
	if p.HasUsername {
		if sec == nil || !sec.VerifyPassword(p.Username, string(p.Password)) {
			return security.Principal{}, errors.New("unknown user or wrong password")
		}
		return security.User(p.Username), nil
	}
	if tc, ok := c.nc.(*tls.Conn); ok {
		if cs := tc.ConnectionState(); len(cs.VerifiedChains) > 0 {
			return security.User(cs.VerifiedChains[0][0].Subject.CommonName), nil
		}
	}
	if c.s.opts.Authentication {
		return security.Principal{}, errors.New("a user name and password are required")
	}
	return security.Anonymous, nil
}

// send writes a packet and flushes.
func (c *conn) send(p packet.Packet) {
	c.write(p, true)
}

// write encodes p into the connection's buffer, flushing when asked; a
// packet over the client's maximum packet size is not sent (it reports
// false).
func (c *conn) write(p packet.Packet, flush bool) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wbuf == nil {
		c.wbuf = c.s.writeBufs.Get().(*[]byte)
	}
	start := len(*c.wbuf)
	named := ""
	if pub, ok := p.(*packet.Publish); ok && c.outAliasMax > 0 {
		p = c.aliasedLocked(pub)
		named = p.(*packet.Publish).Topic
	}
	*c.wbuf = packet.Append(*c.wbuf, c.version, p)
	if c.maxPacket > 0 && len(*c.wbuf)-start > c.maxPacket {
		*c.wbuf = (*c.wbuf)[:start]
		if named != "" && int(c.outAliases[named]) == len(c.outAliases) {
			delete(c.outAliases, named) // (its alias was just given: the client never learnt it)
		}
		return false
	}
	if flush || len(*c.wbuf) >= writeBufSize {
		c.flushLocked()
	}
	return true
}

// aliasedLocked is a PUBLISH to send with a topic alias: the topic's,
// given the first time with the name, then alone (an empty name); a
// PUBLISH of a topic without one, once every alias is taken, goes as it
// is. c.wmu held.
func (c *conn) aliasedLocked(p *packet.Publish) *packet.Publish {
	alias, known := c.outAliases[p.Topic]
	if !known {
		if len(c.outAliases) >= int(c.outAliasMax) {
			return p
		}
		if c.outAliases == nil {
			c.outAliases = map[string]uint16{}
		}
		alias = uint16(len(c.outAliases) + 1)
		c.outAliases[p.Topic] = alias
	}
	out := *p
	out.Props.Set(packet.PropTopicAlias)
	out.Props.TopicAlias = alias
	if known {
		out.Topic = ""
	}
	return &out
}

// writeBufSize is how much a connection buffers before it writes.
const writeBufSize = 4096

// newWriteBuf makes a connection write buffer (Server.writeBufs).
func newWriteBuf() any {
	b := make([]byte, 0, writeBufSize)
	return &b
}

// flush sends what is buffered.
func (c *conn) flush() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.flushLocked()
}

// flushLocked writes the buffered packets and gives the buffer back (a
// failed write ends the connection); c.wmu held.
func (c *conn) flushLocked() {
	if c.wbuf == nil {
		return
	}
	if len(*c.wbuf) > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.nc.Write(*c.wbuf); err != nil {
			c.cancel()
		}
	}
	if cap(*c.wbuf) <= 64<<10 { // (a large packet's buffer is not kept)
		*c.wbuf = (*c.wbuf)[:0]
		c.s.writeBufs.Put(c.wbuf)
	}
	c.wbuf = nil
}

// takenOver ends a connection whose session another took.
func (c *conn) takenOver() {
	if c.version == packet.V5 {
		c.send(&packet.Disconnect{Code: 0x8E, Props: reason("another connection took the session over")})
	}
	c.graceful.Store(true) // (the spec publishes the will; paho's tests expect none on a take-over)
	c.cancel()
}

// finish ends the connection: its session is detached (or dropped when it
// does not outlive it) and the will sent unless the client disconnected.
func (c *conn) finish() {
	c.closeOnce.Do(func() {
		if c.session == nil {
			return
		}
		c.session.detach(c)
		switch {
		case c.will == nil:
		case c.graceful.Load():
			c.s.clearWill(c.session.clientID, c.will)
		default:
			c.s.sendWill(c.session, c.will)
		}
	})
}

// reason is a properties list holding a reason string.
func reason(s string) packet.Properties {
	var p packet.Properties
	if s != "" {
		p.Set(packet.PropReasonString)
		p.ReasonString = s
	}
	return p
}
