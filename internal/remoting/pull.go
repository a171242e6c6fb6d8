package remoting

// PULL_MESSAGE (11). A pull reads up to maxMsgNums messages of one queue
// from queueOffset, drops those the subscription (tags, or a SQL92
// expression on the properties) does not match, and
// answers FOUND with the messages in the stored-message layout (V1) that
// every client decodes, or PULL_NOT_FOUND once the suspend timeout passes
// with nothing new (long polling: appends wake the pull, no polling loop).
// Offsets outside the queue are PULL_OFFSET_MOVED with the offset to use.
// The commit flag commits commitOffset for the group first. Messages written
// by Kafka producers are served too, one message per record.

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

// Pull sysflag bits (PullSysFlag).
const (
	pullCommitOffset = 1 << 0
	pullSuspend      = 1 << 1
	pullSubscription = 1 << 2
)

// maxPullBytes bounds one pull response's body.
const maxPullBytes = 4 << 20

func handlePullMessage(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group, topic := req.Ext("consumerGroup"), req.Ext("topic")
	t, err := s.lookupTopic(topic)
	if err != nil {
		return errorResponse(req, err)
	}
	queueID := atoi32(req.Ext("queueId"))
	if queueID < 0 || int(queueID) >= t.QueueCount() {
		return protocol.NewResponse(req, protocol.InvalidParameter, "queueId "+req.Ext("queueId")+" out of range")
	}
	if cfg, ok := s.broker.GroupConfig(group); ok && !cfg.ConsumeEnable {
		return protocol.NewResponse(req, protocol.NoPermission, "subscription group "+group+" may not consume")
	}
	offset, _ := strconv.ParseInt(req.Ext("queueOffset"), 10, 64)
	maxMsgs := int(atoi32(req.Ext("maxMsgNums")))
	if maxMsgs <= 0 || maxMsgs > 1024 {
		maxMsgs = 32
	}
	sysFlag := atoi32(req.Ext("sysFlag"))
	if sysFlag&pullCommitOffset != 0 {
		if co, err := strconv.ParseInt(req.Ext("commitOffset"), 10, 64); err == nil && co >= 0 {
			s.broker.CommitPulled(group, t.Queues[queueID], model.QueueOffset(co))
		}
	}
	var subType, subExpr string
	if sysFlag&pullSubscription != 0 {
		subType, subExpr = req.Ext("expressionType"), req.Ext("subscription")
	} else if sub, ok := s.clients.subscriptionOf(group, topic); ok {
		subType, subExpr = sub.Expression, sub.SubString
	} else {
		return protocol.NewResponse(req, protocol.SubscriptionNotExist, "no subscription of group "+group+" to "+topic)
	}
	filter, err := s.subscriptionFilter(subType, subExpr)
	if err != nil {
		return protocol.NewResponse(req, protocol.SubscriptionParseFailed, err.Error())
	}
	suspend := time.Duration(0)
	if sysFlag&pullSuspend != 0 {
		ms, _ := strconv.ParseInt(req.Ext("suspendTimeoutMillis"), 10, 64)
		suspend = min(time.Duration(ms)*time.Millisecond, 60*time.Second)
	}
	deadline := time.Now().Add(suspend)
	store := rc.conn.store
	for {
		start, hw, _, err := s.broker.Offsets(t.Name, queueID)
		if err != nil {
			return errorResponse(req, err)
		}
		lso := s.broker.LastStable(t.Queues[queueID], hw)
		resp := protocol.NewResponse(req, protocol.Success, "")
		resp.SetExt("minOffset", strconv.FormatInt(int64(start), 10))
		resp.SetExt("maxOffset", strconv.FormatInt(int64(hw), 10))
		resp.SetExt("suggestWhichBrokerId", "0")
		switch {
		case offset < int64(start) || offset > int64(hw):
			resp.Code = protocol.PullOffsetMoved
			resp.SetExt("nextBeginOffset", strconv.FormatInt(max(min(offset, int64(hw)), int64(start)), 10))
			return resp
		case offset < int64(lso):
			// Kafka records of open transactions wait; aborted ones never come.
			readStart := time.Now()
			var spanned *telemetry.Delivered
			if s.opts.Tracer.Enabled() {
				spanned = &telemetry.Delivered{}
			}
			body, next, err := s.readForPull(t, queueID, model.QueueOffset(offset), lso, maxMsgs, filter, store,
				broker.TraceEvent{Kind: broker.TraceDelivered, Protocol: "remoting", Group: group, Client: rc.conn.remote}, spanned)
			if err != nil {
				return errorResponse(req, err)
			}
			resp.SetExt("nextBeginOffset", strconv.FormatInt(int64(next), 10))
			if len(body) > 0 {
				if spanned != nil {
					s.opts.Tracer.Deliver(rc.ctx, "pull "+topic, readStart, spanned,
						attribute.String("messaging.system", "rocketmq"), attribute.String("messaging.destination.name", topic),
						attribute.String("messaging.consumer.group.name", group), attribute.Int("messaging.destination.partition.id", int(queueID)))
				}
				resp.Body = body
				return resp
			}
			offset = int64(next) // everything read was filtered out
		}
		if !time.Now().Before(deadline) {
			resp.Code = protocol.PullNotFound
			resp.SetExt("nextBeginOffset", strconv.FormatInt(offset, 10))
			return resp
		}
		ctx, cancel := context.WithDeadline(rc.ctx, deadline)
		err = s.broker.Wait(ctx, []broker.Watch{{Topic: t.Name, Index: queueID, Offset: model.QueueOffset(offset), Stable: true}})
		cancel()
		if rc.ctx.Err() != nil {
			return nil
		}
		_ = err // timed out: one more look, then PULL_NOT_FOUND
	}
}

// readForPull reads messages from offset and encodes those that pass
// filter, recording a delivered event (delivered, its template) for each
// traced one (and adding it to spanned, when not nil); it returns the body
// and the offset after what it read.
func (s *Server) readForPull(t *topicRef, queueID int32, offset, stable model.QueueOffset, maxMsgs int, filter msgFilter, store string,
	delivered broker.TraceEvent, spanned *telemetry.Delivered) ([]byte, model.QueueOffset, error) {
	res, err := s.broker.Read(t.Name, queueID, offset, broker.ReadOptions{MaxRecords: maxMsgs, MaxBytes: maxPullBytes,
		SkipTag: tagSkipper(filter)})
	if err != nil {
		return nil, offset, err
	}
	defer res.Release()
	var body []byte
	next, n := offset, 0
	retryTopic := strings.HasPrefix(t.Name.Topic, broker.RetryTopicPrefix)
	emit := func(m *model.Message, off model.QueueOffset, storeTime int64) {
		next = off + 1
		n++
		if !filter.match(m) {
			return
		}
		body = protocol.AppendStoredV1(body, storedMessage(m, rmqName(t.Name), queueID, t.Queues[queueID], off, storeTime, store))
		s.stats.got.Add(1)
		ev := delivered
		ev.Attempt = m.ReconsumeTimes + 1
		if retryTopic {
			ev.Origin = s.tracedOriginPlace(m)
		}
		s.broker.TraceMessage(t, queueID, off, m, ev)
		if spanned != nil {
			tp, _ := m.Header(telemetry.HeaderTraceParent)
			spanned.Add(tp)
		}
	}
	for i := range res.Records {
		r := &res.Records[i]
		if r.BaseOffset >= stable {
			return body, next, nil // behind an open Kafka transaction
		}
		switch r.Format {
		case model.FormatMessage:
			if r.BaseOffset < offset {
				continue
			}
			m, err := broker.DecodeMessage(r.Payload)
			if err != nil {
				return nil, offset, err
			}
			emit(&m, r.BaseOffset, r.StoreTime)
		case model.FormatKafkaBatchV2:
			if s.broker.HiddenKafkaBatch(t.Queues[queueID], r) {
				next = max(next, r.BaseOffset+model.QueueOffset(r.Count))
				continue
			}
			err := s.batches.Records(r.Payload, true, func(kr *kbatch.Record) bool {
				off := r.BaseOffset + model.QueueOffset(kr.OffsetDelta)
				if off < offset || n >= maxMsgs {
					return n < maxMsgs
				}
				m := broker.KafkaRecordMessage(kr)
				emit(&m, off, r.StoreTime)
				return true
			})
			if err != nil {
				return nil, offset, err
			}
		default:
			next = r.BaseOffset + model.QueueOffset(r.Count) // internal records: skipped
		}
		if n >= maxMsgs {
			break
		}
	}
	if n < maxMsgs {
		next = max(next, res.NextOffset) // records skipped by tag after the last one read
	}
	return body, next, nil
}

// tracedOriginPlace is the place a retried copy without an id (a Kafka
// record) was first stored, under which its trace events are found.
func (s *Server) tracedOriginPlace(m *model.Message) string {
	if _, ok := m.Header(broker.HeaderUniqKey); ok {
		return ""
	}
	ref, off, ok := s.originOf(m)
	if !ok {
		return ""
	}
	return broker.TracePlace(ref.Topic.Name, ref.Index, off)
}

// storedMessage lays a message out as pull responses carry it.
func storedMessage(m *model.Message, topic string, queueID int32, q model.QueueID, off model.QueueOffset, storeTime int64, store string) *protocol.StoredMessage {
	n := len(m.Tags) + len(m.Key) + 16
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value) + 2
	}
	props := make([]byte, 0, n)
	if m.Tags != "" {
		props = protocol.AppendProperty(props, propTags, m.Tags)
	}
	if len(m.Key) > 0 {
		props = protocol.AppendProperty(props, propKeys, m.Key)
	}
	for _, h := range m.Headers {
		props = protocol.AppendProperty(props, h.Key, h.Value)
	}
	born := m.BornHost
	if born == "" {
		born = store
	}
	return &protocol.StoredMessage{QueueID: queueID, Flag: m.UserFlag, QueueOffset: int64(off), PhysicalOffset: position(q, off),
		SysFlag: int32(m.Flags), BornTimestamp: m.BornTime, BornHost: born, StoreTimestamp: storeTime, StoreHost: store,
		ReconsumeTimes: m.ReconsumeTimes, Body: m.Body, Topic: topic, Properties: props}
}
