package remoting

// SEND_MESSAGE (10), SEND_MESSAGE_V2 (310, short header names) and
// SEND_BATCH_MESSAGE (320). Each message is stored as one neutral message
// (its properties as headers, TAGS and KEYS as the tag and key), so Kafka
// clients read it too. A zlib body (sysflag bit 0) is kept as sent. An
// unknown topic is created on first send while auto-creation is on. The
// answer carries an offset message id (this node's address and a 64-bit
// position naming the queue and offset), the queue id and offset; batch
// sends answer comma-joined ids. Sends are acknowledged under the storage
// durability policy.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

// maxMessageSize is RocketMQ's default maxMessageSize (4 MiB).
const maxMessageSize = 4 << 20

// v2Short maps send header names to their SEND_MESSAGE_V2 / batch short
// forms.
var v2Short = map[string]string{"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d",
	"queueId": "e", "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
	"unitMode": "k", "maxReconsumeTimes": "l", "batch": "m", "brokerName": "n"}

// sendHeader reads a send header by its long names, in their long or
// short form.
type sendHeader struct {
	req   *protocol.Command
	short bool // SEND_MESSAGE_V2 / batch short names
}

// sendHeaderOf is req's send header.
func sendHeaderOf(req *protocol.Command) sendHeader {
	_, short := req.ExtFields.Get("b")
	return sendHeader{req: req, short: short}
}

// get returns a field by its long name.
func (h sendHeader) get(k string) string {
	if h.short {
		if s, ok := v2Short[k]; ok {
			return h.req.Ext(s)
		}
	}
	return h.req.Ext(k)
}

func handleSendMessage(rc *reqCtx, req *protocol.Command) *protocol.Command {
	sc := &sendCall{}
	if resp := prepareSend(sc, rc, req); resp != nil {
		return resp
	}
	call := &sc.call
	call.Pub, call.Err = rc.conn.s.broker.Publish(rc.ctx, call.Topic, call.Index, call.Msgs)
	return sc.answer(rc)
}

// handleSends runs send requests of one connection that arrived together:
// each is authorized, parsed and answered on its own, and what they
// publish is stored in one append.
func (c *conn) handleSends(batch []inbound) {
	start := time.Now()
	sends := make([]*sendCall, 0, len(batch))
	for _, in := range batch {
		principal, resp := c.authorizeRequest(in.req)
		if resp == nil {
			sc := &sendCall{}
			sc.ctx = reqCtx{conn: c, ctx: c.ctx, principal: principal}
			if resp = prepareSend(sc, &sc.ctx, in.req); resp == nil {
				sends = append(sends, sc)
				continue
			}
		}
		c.answer(in.req, resp)
	}
	if len(sends) > 0 {
		calls := make([]broker.PublishCall, len(sends))
		for i, sc := range sends {
			calls[i] = sc.call
		}
		c.s.broker.PublishAll(c.ctx, calls)
		for i, sc := range sends {
			sc.call = calls[i]
			c.answer(sc.req, sc.answer(&sc.ctx))
		}
	}
	if obs := c.s.opts.ObserveRequest; obs != nil {
		took := time.Since(start)
		for _, in := range batch {
			obs(codeName(in.req.Code), took)
		}
	}
}

// sendCall is a send request parsed and checked, ready to publish, with
// room for what a single send needs (one allocation for all of it).
type sendCall struct {
	req   *protocol.Command
	h     sendHeader
	ctx   reqCtx // the request's, for sends handled together
	call  broker.PublishCall
	start time.Time
	uniq  string           // the first message's UNIQ_KEY
	one   [1]model.Message // the message of a single send
	props [12]protocol.Property
	keys  [2]string
	hdrs  [8]model.Header
	vals  [192]byte // the headers' values
}

// prepareSend parses and checks a send request into sc, ready to publish;
// it returns the answer instead when there is nothing to publish.
func prepareSend(sc *sendCall, rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	h := sendHeaderOf(req)
	sc.req, sc.h = req, h
	name, err := topicName(h.get("topic"))
	if err != nil {
		return errorResponse(req, err)
	}
	t, err := s.sendTopic(rc, name, int(atoi32(h.get("defaultTopicQueueNums"))))
	if err != nil {
		return errorResponse(req, err)
	}
	sysFlag := atoi32(h.get("sysFlag"))
	born, _ := strconv.ParseInt(h.get("bornTimestamp"), 10, 64)
	base := model.Message{BornTime: born, Flags: uint32(sysFlag), Producer: h.get("producerGroup"),
		ReconsumeTimes: atoi32(h.get("reconsumeTimes")), BornHost: rc.conn.remote}
	var msgs []model.Message
	if req.Code == protocol.SendBatchMessage {
		batch, err := protocol.DecodeBatch(req.Body)
		if err != nil {
			return protocol.NewResponse(req, protocol.MessageIllegal, err.Error())
		}
		msgs = make([]model.Message, 0, len(batch))
		for i, bm := range batch {
			m := base
			m.UserFlag, m.Body = bm.Flag, bm.Body
			uniq := setProperties(&m, protocol.ParseProperties(bm.Properties))
			if i == 0 {
				sc.uniq = uniq
			}
			msgs = append(msgs, m)
		}
	} else {
		sc.one[0] = base
		m := &sc.one[0]
		m.UserFlag, m.Body = atoi32(h.get("flag")), req.Body
		m.IndexKeys, m.Headers = sc.keys[:0], sc.hdrs[:0]
		sc.uniq = setPropertiesIn(m, protocol.ParsePropertiesTo(sc.props[:0], h.get("properties")), sc.vals[:0])
		s.stampRequest(m, rc.conn)
		msgs = sc.one[:]
	}
	for i := range msgs {
		if len(msgs[i].Body) > maxMessageSize {
			return protocol.NewResponse(req, protocol.MessageIllegal,
				fmt.Sprintf("message body of %d bytes exceeds %d", len(msgs[i].Body), maxMessageSize))
		}
	}
	if q := s.opts.Quotas; q.Active() {
		if err := q.CheckStorage(t.Name); err != nil {
			return errorResponse(req, err)
		}
		if !q.Admit(t.Name, rc.quotaUser(), "", quota.Produce, len(req.Body)) {
			// RocketMQ's flow control answer: the client backs off and retries.
			return protocol.NewResponse(req, protocol.SystemBusy, "[QUOTA] broker busy: "+t.Name.Short()+" is over its produce byte rate")
		}
	}
	if len(msgs) == 0 {
		return protocol.NewResponse(req, protocol.MessageIllegal, "no message")
	}
	queueID := atoi32(h.get("queueId"))
	if queueID < 0 || int(queueID) >= t.QueueCount() {
		queueID = rand.Int32N(int32(t.QueueCount()))
	}
	sc.call = broker.PublishCall{Topic: t, Index: queueID, Msgs: msgs}
	sc.start = time.Now()
	return nil
}

// answer is the answer to a published send.
func (sc *sendCall) answer(rc *reqCtx) *protocol.Command {
	s, req, h, pub, msgs := rc.conn.s, sc.req, sc.h, &sc.call.Pub, sc.call.Msgs
	err := sc.call.Err
	if err == nil && s.opts.Tracer.Enabled() {
		parent, _ := msgs[0].Header(telemetry.HeaderTraceParent)
		s.opts.Tracer.Start(rc.ctx, "send "+h.get("topic"), string(parent), trace.SpanKindServer, sc.start,
			attribute.String("messaging.system", "rocketmq"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", h.get("topic")), attribute.Int("messaging.batch.message_count", len(msgs)),
			attribute.String("messaging.rocketmq.client_group", h.get("producerGroup")), attribute.Int64("messaging.rocketmq.queue_offset", int64(pub.Offsets[0]))).End()
	}
	if err != nil {
		if errors.Is(err, broker.ErrTimerIllegal) || errors.Is(err, model.ErrMessageTooLarge) {
			return protocol.NewResponse(req, protocol.MessageIllegal, err.Error())
		}
		return errorResponse(req, err)
	}
	var msgID string
	if len(pub.Offsets) == 1 {
		msgID = rc.conn.ids.ID(position(pub.Queue, pub.Offsets[0]))
	} else {
		ids := make([]string, len(pub.Offsets))
		for i, o := range pub.Offsets {
			ids[i] = rc.conn.ids.ID(position(pub.Queue, o))
		}
		msgID = strings.Join(ids, ",")
	}
	resp := sendResponse(req, msgID, sc.call.Index, pub.Offsets[0], sc.uniq)
	switch pub.Kind {
	case broker.PublishedNow:
		s.stats.put.Add(int64(len(pub.Offsets)))
	case broker.PublishedTimer:
		if sc.uniq != "" {
			resp.SetExt("recallHandle", s.recallHandle(h.get("topic"), pub.Due, sc.uniq))
		}
	}
	return resp
}

// sendTopic returns the topic a send names, creating it while auto-creation
// is on with the queue count the producer's route promised it (the client's
// defaultTopicQueueNums, at most the broker default), as RocketMQ does: a
// producer hashing keys over that many queues keeps doing so after its
// route refreshes.
func (s *Server) sendTopic(rc *reqCtx, name model.TopicName, clientQueues int) (*topicRef, error) {
	return s.broker.EnsureTopicWith(rc.ctx, name, clientQueues)
}

// sendResponse is the answer to a successful send (msgID: its messages'
// ids, comma-joined; uniq: the first one's UNIQ_KEY, if any).
func sendResponse(req *protocol.Command, msgID string, queueID int32, offset model.QueueOffset, uniq string) *protocol.Command {
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("msgId", msgID)
	resp.SetExt("queueId", strconv.Itoa(int(queueID)))
	resp.SetExt("queueOffset", strconv.FormatInt(int64(offset), 10))
	resp.SetExt("MSG_REGION", "DefaultRegion")
	resp.SetExt("TRACE_ON", "true")
	if uniq != "" {
		resp.SetExt("transactionId", uniq)
	}
	return resp
}

// Properties with a place of their own in a stored message.
const (
	propTags    = "TAGS"
	propKeys    = "KEYS"
	propUniqKey = "UNIQ_KEY"
)

// setProperties puts properties on a message: TAGS and KEYS become the tag
// and key, the rest headers in order. It returns the UNIQ_KEY.
func setProperties(m *model.Message, props []protocol.Property) (uniq string) {
	return setPropertiesIn(m, props, nil)
}

// setPropertiesIn is setProperties with room for the header values (they
// share one allocation when it is too small).
func setPropertiesIn(m *model.Message, props []protocol.Property, values []byte) (uniq string) {
	size := 0
	for _, p := range props {
		size += len(p.Value)
	}
	if cap(values) < size {
		values = make([]byte, 0, size)
	}
	m.Headers = slices.Grow(m.Headers, len(props))
	for _, p := range props {
		switch p.Key {
		case propTags:
			m.Tags = p.Value
		case propKeys:
			m.Key = []byte(p.Value)
			m.IndexKeys = append(m.IndexKeys, strings.Fields(p.Value)...)
		default:
			values = append(values, p.Value...)
			m.Headers = append(m.Headers, model.Header{Key: p.Key, Value: values[len(values)-len(p.Value) : len(values) : len(values)]})
			if p.Key == propUniqKey {
				m.IndexKeys = append(m.IndexKeys, p.Value)
				uniq = p.Value
			}
		}
	}
	return uniq
}

// position is the 64-bit position an offset message id carries: the
// storage queue id in the high 24 bits and the queue offset in the low 40,
// so it stays valid however the log is compacted or relocated.
func position(q model.QueueID, off model.QueueOffset) int64 {
	return int64(q)<<40 | int64(off)&(1<<40-1)
}

func atoi32(s string) int32 {
	n, _ := strconv.ParseInt(s, 10, 32)
	return int32(n)
}
