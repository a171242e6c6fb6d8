package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
	"github.com/rosettamq/rosetta/internal/mqtt/topic"
)

// Inbound publishes. QoS 0 is stored and forgotten; QoS 1 is answered
// with PUBACK once durable; QoS 2 with PUBREC once durable, its packet
// identifier then kept until PUBREL, so a PUBLISH sent again meanwhile
// (DUP) is not stored twice. Acknowledgements go out in the order the
// publishes came, each once its record is durable.

// pendingAck is an inbound publish waiting for durability.
type pendingAck struct {
	kind     byte // PUBACK, PUBREC or PUBCOMP
	packetID uint16
	stored   bool // res is a record to wait for
	res      produce.Result
	code     byte // a failure's reason code (stored nothing)
	why      string
}

// Reason codes of acknowledgements.
const (
	codeUnspecified      = 0x80
	codeNotAuthorizedPub = 0x87
	codeTopicInvalid     = 0x90
	codePacketIDInUse    = 0x91
	codeIDNotFound       = 0x92
	codeQuotaExceeded    = 0x97
	codeNoSubscribers    = 0x10
)

func (c *conn) handlePublish(p *packet.Publish) error {
	if err := c.resolveAlias(p); err != nil {
		return err
	}
	if err := topic.ValidName(p.Topic); err != nil {
		return &packet.Error{Code: packet.CodeTopicNameBad, Reason: err.Error()}
	}
	ss := c.session
	if p.QoS == 2 && ss.qos2Pending(p.PacketID) {
		// Sent again before our PUBREC arrived: stored already.
		c.queueAck(pendingAck{kind: packet.PUBREC, packetID: p.PacketID})
		return nil
	}
	var res produce.Result
	var err error
	durableQoS2 := p.QoS == 2 && c.s.store != nil && ss.isPersisted()
	if durableQoS2 {
		err = c.s.storeQoS2(c.ctx, c.principal, c.host(), ss, p)
	} else {
		res, err = c.s.storePublish(c.ctx, c.principal, c.host(), ss.clientID, p)
	}
	if err != nil {
		code, why := byte(codeUnspecified), err.Error()
		switch {
		case errors.Is(err, errNotAuthorized):
			code = codeNotAuthorizedPub
		case errors.Is(err, model.ErrInvalidTopic):
			code = codeTopicInvalid
		case errors.Is(err, model.ErrDiskFull):
			code = codeQuotaExceeded
		}
		c.log.Info("mqtt publish refused", "topic", p.Topic, "err", err)
		if p.QoS == 0 {
			return nil
		}
		if c.version < packet.V5 {
			if code == codeNotAuthorizedPub {
				code = 0 // 3.1.1 acknowledges and drops (as mosquitto does)
			} else {
				return fmt.Errorf("publish to %s: %w", p.Topic, err)
			}
		}
		kind := packet.PUBACK
		if p.QoS == 2 {
			kind = packet.PUBREC
		}
		c.queueAck(pendingAck{kind: kind, packetID: p.PacketID, code: code, why: why})
		return nil
	}
	switch p.QoS {
	case 1:
		c.queueAck(pendingAck{kind: packet.PUBACK, packetID: p.PacketID, stored: true, res: res})
	case 2:
		ss.setQoS2Pending(p.PacketID, true)
		c.queueAck(pendingAck{kind: packet.PUBREC, packetID: p.PacketID, stored: !durableQoS2, res: res})
	}
	return nil
}

// resolveAlias applies an MQTT 5 topic alias: an alias with a topic sets
// it, one without names the topic set before.
func (c *conn) resolveAlias(p *packet.Publish) error {
	if !p.Props.Has(packet.PropTopicAlias) {
		return nil
	}
	a := p.Props.TopicAlias
	if a == 0 || a > maxTopicAliases {
		return &packet.Error{Code: 0x94, Reason: fmt.Sprintf("topic alias %d (at most %d)", a, maxTopicAliases)}
	}
	if p.Topic != "" {
		if c.aliases == nil {
			c.aliases = map[uint16]string{}
		}
		c.aliases[a] = p.Topic
		return nil
	}
	t, ok := c.aliases[a]
	if !ok {
		return &packet.Error{Code: packet.CodeProtocolError, Reason: fmt.Sprintf("topic alias %d was never set", a)}
	}
	p.Topic = t
	return nil
}

// queueAck hands an acknowledgement to the connection's acknowledger.
func (c *conn) queueAck(a pendingAck) {
	c.ackerOnce.Do(func() {
		c.acks = make(chan pendingAck, 1024)
		go c.acknowledge()
	})
	select {
	case c.acks <- a:
	case <-c.ctx.Done():
	}
}

// acknowledge sends acknowledgements in order, each once its record is
// durable.
func (c *conn) acknowledge() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case a := <-c.acks:
			if a.stored {
				if err := c.s.appender.WaitDurable(c.ctx, a.res); err != nil {
					c.log.Info("mqtt publish not stored", "err", err)
					if c.version < packet.V5 {
						c.cancel()
						return
					}
					a.code, a.why = codeUnspecified, err.Error()
					if a.kind == packet.PUBREC {
						c.session.setQoS2Pending(a.packetID, false)
					}
				}
			}
			ack := &packet.Ack{Kind: a.kind, PacketID: a.packetID}
			if c.version == packet.V5 {
				ack.Code, ack.Props = a.code, reason(a.why)
			}
			c.write(ack, len(c.acks) == 0)
		}
	}
}

// handleAck takes the client's PUBACK, PUBREC, PUBREL and PUBCOMP.
func (c *conn) handleAck(a *packet.Ack) error {
	ss := c.session
	switch a.Kind {
	case packet.PUBREL:
		found := ss.setQoS2Pending(a.PacketID, false)
		if found {
			ss.noteIn2Released(a.PacketID)
		}
		resp := &packet.Ack{Kind: packet.PUBCOMP, PacketID: a.PacketID}
		if !found && c.version == packet.V5 {
			resp.Code = codeIDNotFound
		}
		// After the PUBRECs queued before it.
		c.queueAck(pendingAck{kind: packet.PUBCOMP, packetID: a.PacketID, code: resp.Code})
		return nil
	case packet.PUBACK, packet.PUBREC, packet.PUBCOMP:
		return ss.acked(a)
	}
	return nil
}

var errNotAuthorized = errors.New("not authorized")

// storePublish appends a publish to its topic: a record of the MQTT
// topic's queue; a retained publish also becomes the topic's retained
// message.
func (s *Server) storePublish(ctx context.Context, principal security.Principal, host, client string, p *packet.Publish) (produce.Result, error) {
	name := s.opts.Mapping.TopicOf(p.Topic)
	if sec := s.opts.Security; sec != nil && sec.AuthorizationEnabled() &&
		!sec.Authorize(principal, host, security.ResourceTopic, name.Short(), security.OpWrite) {
		return produce.Result{}, fmt.Errorf("%w: %s may not publish to %s", errNotAuthorized, principal, name.Short())
	}
	if err := s.keepRetained(ctx, client, p); err != nil {
		return produce.Result{}, err
	}
	t, err := s.b.EnsureTopic(ctx, name)
	if err != nil {
		return produce.Result{}, err
	}
	rec := publishRecord(p, client, time.Now().UnixMilli())
	batch, err := s.batches.Build(kbatch.CodecNone, []kbatch.NewRecord{rec})
	if err != nil {
		return produce.Result{}, err
	}
	index := queueFor(p.Topic, len(t.Queues))
	res, err := s.appender.Append(ctx, t, index, batch, "")
	if err == nil {
		s.traceProduced(t, index, res.BaseOffset, client, p)
	}
	return res, err
}

// traceProduced records a stored publish in the message trace (when its
// topic is traced).
func (s *Server) traceProduced(t *broker.Topic, index int32, offset model.QueueOffset, client string, p *packet.Publish) {
	if offset < 0 || !s.b.Traced(t, "") {
		return
	}
	global := int32(t.GlobalIndex(s.b.Placement().Group, int(index)))
	s.b.TraceRecord(t, global, offset, broker.TraceEvent{Kind: broker.TraceProduced, Protocol: "mqtt", Client: client,
		Detail: fmt.Sprintf("%s QoS %d", p.Topic, p.QoS)})
}

// traceDelivered records a message sent to a session in the message
// trace (when its topic is traced); group names a shared subscription.
func (s *Server) traceDelivered(w watchedQueue, sm *broker.StoredMessage, client, group string, qos byte, attempt int32) {
	if w.t == nil || !s.b.Traced(w.t, "") {
		return
	}
	s.b.TraceMessage(w.t, w.global, sm.Offset, &sm.Message, broker.TraceEvent{Kind: broker.TraceDelivered, Protocol: "mqtt",
		Client: client, Group: group, Attempt: attempt, Detail: fmt.Sprintf("QoS %d", qos)})
}

// host is the client's address without its port (ACLs' host).
func (c *conn) host() string {
	h, _, err := net.SplitHostPort(c.nc.RemoteAddr().String())
	if err != nil {
		return c.nc.RemoteAddr().String()
	}
	return h
}

// willMessage is a connection's will: published when the connection ends
// without DISCONNECT, after its delay (MQTT 5), with the rights of the
// connection's principal.
type willMessage struct {
	publish   packet.Publish
	delay     time.Duration
	principal security.Principal
	host      string
	id        string // its durable record's (storedWill.ID)
}

func validWillTopic(name string) error {
	if err := topic.ValidName(name); err != nil {
		return &packet.Error{Code: packet.CodeTopicNameBad, Reason: "will: " + err.Error()}
	}
	return nil
}

// sendWill publishes a will: at once, or after its delay unless the
// session was taken up again meanwhile.
func (s *Server) sendWill(ss *session, w *willMessage) {
	publish := func() {
		p := w.publish
		if _, err := s.storePublish(context.Background(), w.principal, w.host, ss.clientID, &p); err != nil {
			s.log.Warn("mqtt: publishing a will", "client", ss.clientID, "topic", p.Topic, "err", err)
		}
		s.clearWill(ss.clientID, w)
	}
	if w.delay <= 0 {
		publish()
		return
	}
	ss.scheduleWill(min(w.delay, ss.expiryOr(w.delay)), publish)
}
