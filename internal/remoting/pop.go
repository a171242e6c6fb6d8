package remoting

// POP over remoting (RocketMQ 5 clients in pop mode, and proxies):
// POP_MESSAGE (200050), ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151),
// CHANGE_MESSAGE_INVISIBLETIME (200053) and NOTIFICATION (200054), over the
// same POP engine as gRPC. Each popped message carries its receipt handle
// as property POP_CK, in RocketMQ's extraInfo layout "ckOffset popTime
// invisibleTime reviveQid retryFlag brokerName queueId queueOffset":
// ckOffset is the first offset the pop handed out from that queue (batch
// acks address messages as bits above it) and popTime+invisibleTime is the
// lease's deadline, which names the lease (a redelivery or a change of
// invisible time moves it, so older handles stop working). queueId -1
// pops every queue of the topic; order=true (or the group's
// consumeMessageOrderly) holds a queue back while a message of it is in
// flight. Nothing popped within pollTime answers POLLING_TIMEOUT.

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

const propPopCK = "POP_CK"

// maxPopPoll bounds a POP_MESSAGE long poll.
const maxPopPoll = 30 * time.Second

// extraInfo lays a handle out as RocketMQ's POP_CK; popTime is the
// deadline less the invisible time, so that the two add up to it.
func (s *Server) extraInfo(h pop.Handle, ckOffset model.QueueOffset, invisible int64, queueIndex int32) string {
	return strings.Join([]string{strconv.FormatInt(int64(ckOffset), 10), strconv.FormatInt(h.Deadline-invisible, 10),
		strconv.FormatInt(invisible, 10), "0", "0", s.opts.BrokerName, strconv.Itoa(int(queueIndex)),
		strconv.FormatInt(int64(h.Offset), 10)}, " ")
}

// popHandle reads the handle an ack or change names: the deadline from
// extraInfo, the queue from the topic and queue id, the offset from the
// header (or extraInfo).
func (s *Server) popHandle(req *protocol.Command) (pop.Handle, error) {
	t, err := s.lookupTopic(req.Ext("topic"))
	if err != nil {
		return pop.Handle{}, err
	}
	parts := strings.Split(req.Ext("extraInfo"), " ")
	if len(parts) < 7 {
		return pop.Handle{}, pop.ErrBadHandle
	}
	popTime, err1 := strconv.ParseInt(parts[1], 10, 64)
	invisible, err2 := strconv.ParseInt(parts[2], 10, 64)
	qid, err3 := strconv.Atoi(req.Ext("queueId"))
	if req.Ext("queueId") == "" {
		qid, err3 = strconv.Atoi(parts[6])
	}
	off, err4 := strconv.ParseInt(req.Ext("offset"), 10, 64)
	if req.Ext("offset") == "" && len(parts) > 7 {
		off, err4 = strconv.ParseInt(parts[7], 10, 64)
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return pop.Handle{}, pop.ErrBadHandle
	}
	return lease(t, qid, off, popTime, invisible)
}

// lease names a lease by queue index, offset and deadline.
func lease(t *topicRef, qid int, off, popTime, invisible int64) (pop.Handle, error) {
	if qid < 0 || qid >= len(t.Queues) || off < 0 || popTime+invisible <= 0 {
		return pop.Handle{}, pop.ErrBadHandle
	}
	return pop.Handle{Queue: t.Queues[qid], Offset: model.QueueOffset(off), Deadline: popTime + invisible}, nil
}

func handlePopMessage(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	if s.pop == nil {
		return protocol.NewResponse(req, protocol.RequestCodeNotSupported, "POP is not available")
	}
	group := req.Ext("consumerGroup")
	t, err := s.lookupTopic(req.Ext("topic"))
	if err != nil || group == "" {
		if err == nil {
			err = errInvalidParameter
		}
		return errorResponse(req, err)
	}
	qid := atoi32(req.Ext("queueId"))
	var queues []model.QueueID
	switch {
	case qid == -1:
		start := int(s.opaque.Add(1))
		for i := range t.Queues {
			queues = append(queues, t.Queues[(start+i)%len(t.Queues)])
		}
	case qid >= 0 && int(qid) < len(t.Queues):
		queues = []model.QueueID{t.Queues[qid]}
	default:
		return protocol.NewResponse(req, protocol.InvalidParameter, "no such queue")
	}
	max := int(atoi32(req.Ext("maxMsgNums")))
	if max <= 0 || max > 1024 {
		max = 32
	}
	invisibleMs, _ := strconv.ParseInt(req.Ext("invisibleTime"), 10, 64)
	if invisibleMs <= 0 {
		return protocol.NewResponse(req, protocol.InvalidParameter, "invisibleTime required")
	}
	pollMs, _ := strconv.ParseInt(req.Ext("pollTime"), 10, 64)
	filt, err := s.subscriptionFilter(req.Ext("expType"), req.Ext("exp"))
	if err != nil {
		return protocol.NewResponse(req, protocol.SubscriptionParseFailed, err.Error())
	}
	cfg, _ := s.broker.GroupConfig(group)
	order := req.Ext("order") == "true" || cfg.ConsumeMessageOrderly
	var got []pop.Delivery
	start := time.Now()
	found, err := s.broker.PollTopic(rc.ctx, t, min(time.Duration(pollMs)*time.Millisecond, maxPopPoll), func() (bool, error) {
		var err error
		got, err = s.pop.ReceiveLive(rc.ctx, group, queues, max, time.Duration(invisibleMs)*time.Millisecond, order, filt.match)
		return len(got) > 0, err
	})
	switch {
	case err != nil:
		return errorResponse(req, err)
	case !found:
		return protocol.NewResponse(req, protocol.PollingTimeout, "no new message")
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("popTime", strconv.FormatInt(got[0].Handle.Deadline-invisibleMs, 10))
	resp.SetExt("invisibleTime", strconv.FormatInt(invisibleMs, 10))
	resp.SetExt("reviveQid", "0")
	resp.SetExt("restNum", "0")
	ckOffset := map[model.QueueID]model.QueueOffset{}
	for _, d := range got {
		if o, ok := ckOffset[d.Queue]; !ok || d.Offset < o {
			ckOffset[d.Queue] = d.Offset
		}
	}
	var body []byte
	for i := range got {
		d := &got[i]
		ref, _ := s.broker.QueueByID(d.Queue)
		m := d.Message
		m.Headers = append(m.Headers, model.Header{Key: propPopCK, Value: []byte(s.extraInfo(d.Handle, ckOffset[d.Queue], invisibleMs, ref.Index))})
		m.ReconsumeTimes = d.Attempt - 1
		body = protocol.AppendStoredV1(body, storedMessage(&m, rmqName(t.Name), ref.Index, d.Queue, d.Offset, d.StoreTime, rc.conn.store))
	}
	if s.opts.Tracer.Enabled() {
		s.opts.Tracer.Deliver(rc.ctx, "pop "+req.Ext("topic"), start, deliveredOf(got),
			attribute.String("messaging.system", "rocketmq"), attribute.String("messaging.destination.name", req.Ext("topic")),
			attribute.String("messaging.consumer.group.name", group))
	}
	resp.Body = body
	return resp
}

func handleAckMessage(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	if s.pop == nil {
		return protocol.NewResponse(req, protocol.RequestCodeNotSupported, "POP is not available")
	}
	h, err := s.popHandle(req)
	if err == nil {
		err = s.pop.Ack(rc.ctx, req.Ext("consumerGroup"), h)
	}
	return popResponse(req, err)
}

func handleChangeInvisibleTime(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	if s.pop == nil {
		return protocol.NewResponse(req, protocol.RequestCodeNotSupported, "POP is not available")
	}
	h, err := s.popHandle(req)
	invisibleMs, perr := strconv.ParseInt(req.Ext("invisibleTime"), 10, 64)
	if err == nil && (perr != nil || invisibleMs < 0) {
		err = errInvalidParameter
	}
	if err != nil {
		return popResponse(req, err)
	}
	nh, err := s.pop.ChangeInvisible(rc.ctx, req.Ext("consumerGroup"), h, time.Duration(invisibleMs)*time.Millisecond)
	if err != nil {
		return popResponse(req, err)
	}
	ref, _ := s.broker.QueueByID(nh.Queue)
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("extraInfo", s.extraInfo(nh, nh.Offset, invisibleMs, ref.Index))
	resp.SetExt("popTime", strconv.FormatInt(nh.Deadline-invisibleMs, 10))
	resp.SetExt("reviveQid", "0")
	resp.SetExt("invisibleTime", strconv.FormatInt(invisibleMs, 10))
	return resp
}

// popResponse answers an ack or change.
func popResponse(req *protocol.Command, err error) *protocol.Command {
	switch {
	case err == nil:
		return protocol.NewResponse(req, protocol.Success, "")
	case errors.Is(err, pop.ErrBadHandle), errors.Is(err, pop.ErrStaleHandle):
		return protocol.NewResponse(req, protocol.InvalidParameter, "receipt handle: "+err.Error())
	}
	return errorResponse(req, err)
}

func handleNotification(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, err := s.lookupTopic(req.Ext("topic"))
	if err != nil {
		return errorResponse(req, err)
	}
	pollMs, _ := strconv.ParseInt(req.Ext("pollTime"), 10, 64)
	has := func() bool {
		for i := range t.Queues {
			if _, hw, _, err := s.broker.Offsets(t.Name, int32(i)); err == nil && hw > 0 {
				if c, err := s.broker.FetchOffsets(req.Ext("consumerGroup"), t.Name); err == nil {
					if off, ok := c[int32(i)]; !ok || off.Offset < hw {
						return true
					}
				}
			}
		}
		return false
	}
	found, _ := s.broker.PollTopic(rc.ctx, t, min(time.Duration(pollMs)*time.Millisecond, maxPopPoll),
		func() (bool, error) { return has(), nil })
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("hasMsg", strconv.FormatBool(found))
	return resp
}

// handleBatchAck acknowledges the messages a BATCH_ACK_MESSAGE body names.
// As upstream, handles no longer current (acked, redelivered, changed)
// are skipped and the request still succeeds; an unknown topic or a
// malformed body is refused.
func handleBatchAck(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	if s.pop == nil {
		return protocol.NewResponse(req, protocol.RequestCodeNotSupported, "POP is not available")
	}
	_, acks, err := protocol.DecodeBatchAckBody(req.Body)
	if err != nil {
		s.log.Info("batch ack refused", "remote", rc.conn.remote, "err", err)
		return protocol.NewResponse(req, protocol.InvalidParameter, err.Error())
	}
	stale := 0
	for _, a := range acks {
		t, err := s.lookupTopic(a.Topic)
		if err != nil {
			return errorResponse(req, err)
		}
		for _, off := range a.Offsets {
			h, err := lease(t, int(a.QueueID), off, a.PopTime, a.InvisibleTime)
			if err == nil {
				err = s.pop.Ack(rc.ctx, a.ConsumerGroup, h)
			}
			switch {
			case errors.Is(err, pop.ErrBadHandle), errors.Is(err, pop.ErrStaleHandle):
				stale++
			case err != nil:
				return errorResponse(req, err)
			}
		}
	}
	if stale > 0 {
		s.log.Debug("batch ack named handles no longer current", "remote", rc.conn.remote, "count", stale)
	}
	return protocol.NewResponse(req, protocol.Success, "")
}

// deliveredOf describes POP deliveries for a delivery span.
func deliveredOf(got []pop.Delivery) *telemetry.Delivered {
	d := &telemetry.Delivered{}
	for i := range got {
		tp, _ := got[i].Message.Header(telemetry.HeaderTraceParent)
		d.Add(tp)
	}
	return d
}
