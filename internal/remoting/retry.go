package remoting

// CONSUMER_SEND_MSG_BACK (36): a consumer could not process a message. The
// message (found by the position in its offset message id) goes back to the
// group's retry topic %RETRY%<group> after a delay level — the one asked,
// or 3 + its reconsume count (10 s, 30 s, 1 min, … 2 h) — with its reconsume
// count raised, RETRY_TOPIC naming its topic and ORIGIN_MESSAGE_ID its first
// id. Once it has been reconsumed maxReconsumeTimes times (default 16), or
// when the level is negative (ordered consumers giving up), it goes to the
// dead-letter topic %DLQ%<group> instead, at once. Messages sent with a DELAY
// property (producers, and clients that send a retry themselves) wait in the
// broker's delay levels; see broker.AppendDelayed.

import (
	"context"
	"strconv"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// Properties of retried messages.
const (
	propRetryTopic  = broker.HeaderRetryTopic
	propOriginMsgID = broker.HeaderOriginMessageID
)

func handleConsumerSendMsgBack(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group := req.Ext("group")
	pos, err := strconv.ParseInt(req.Ext("offset"), 10, 64)
	if err != nil || group == "" {
		return protocol.NewResponse(req, protocol.InvalidParameter, "group and offset are required")
	}
	f, err := s.messageAt(pos)
	if err != nil {
		return protocol.NewResponse(req, protocol.SystemError, "look up message: "+err.Error())
	}
	m, topic := f.msg, rmqName(f.topic.Name)
	ctx := s.traceOrigin(rc.ctx, f)
	if _, ok := m.Header(propRetryTopic); !ok {
		orig := req.Ext("originTopic")
		if orig == "" {
			orig = topic
		}
		m.Headers = append(m.Headers, model.Header{Key: propRetryTopic, Value: []byte(orig)})
	}
	if _, ok := m.Header(propOriginMsgID); !ok {
		id := req.Ext("originMsgId")
		if id == "" {
			id = rc.conn.ids.ID(pos)
		}
		m.Headers = append(m.Headers, model.Header{Key: propOriginMsgID, Value: []byte(id)})
	}
	maxTimes := atoi32(req.Ext("maxReconsumeTimes"))
	if req.Ext("maxReconsumeTimes") == "" || maxTimes < 0 {
		cfg, _ := s.broker.GroupConfig(group) // the group's retryMaxTimes (16 unless configured)
		maxTimes = int32(cfg.RetryMaxTimes)
	}
	level := int(atoi32(req.Ext("delayLevel")))
	times := m.ReconsumeTimes
	m.ReconsumeTimes++
	if times >= maxTimes || level < 0 {
		err = s.broker.DeadLetter(ctx, group, nil, m)
	} else {
		if level == 0 {
			level = 3 + int(times)
		}
		err = s.broker.RetryLater(ctx, group, m, level)
	}
	if err != nil {
		return errorResponse(req, err)
	}
	return protocol.NewResponse(req, protocol.Success, "")
}

// traceOrigin names, for the trace of a message without an id (a Kafka
// record) sent back, the place it was first stored: where f is, or — for a
// copy in a retry topic — where its ORIGIN_MESSAGE_ID points.
func (s *Server) traceOrigin(ctx context.Context, f *found) context.Context {
	if _, ok := f.msg.Header(broker.HeaderUniqKey); ok {
		return ctx
	}
	if _, ok := f.msg.Header(propRetryTopic); !ok {
		return broker.WithTraceOrigin(ctx, f.topic.Name, f.index, f.offset)
	}
	if ref, off, ok := s.originOf(&f.msg); ok {
		return broker.WithTraceOrigin(ctx, ref.Topic.Name, ref.Index, off)
	}
	return ctx
}

// originOf finds where a retried copy's original was stored, from its
// ORIGIN_MESSAGE_ID (an offset message id).
func (s *Server) originOf(m *model.Message) (broker.QueueRef, model.QueueOffset, bool) {
	id, _ := m.Header(propOriginMsgID)
	pos, err := protocol.ParseOffsetMessageID(string(id))
	if err != nil {
		return broker.QueueRef{}, 0, false
	}
	ref, err := s.broker.QueueByID(model.QueueID(pos >> 40))
	return ref, model.QueueOffset(pos & (1<<40 - 1)), err == nil
}

// found is a message looked up by position.
type found struct {
	msg       model.Message // its bytes are copies
	topic     *topicRef
	index     int32
	queue     model.QueueID
	offset    model.QueueOffset
	storeTime int64
}

// stored lays a found message out as responses carry it.
func (f *found) stored(store string) *protocol.StoredMessage {
	return storedMessage(&f.msg, rmqName(f.topic.Name), f.index, f.queue, f.offset, f.storeTime, store)
}

// messageAt reads the message at an offset message id's position.
func (s *Server) messageAt(pos int64) (*found, error) {
	q, off := model.QueueID(pos>>40), model.QueueOffset(pos&(1<<40-1))
	ref, err := s.broker.QueueByID(q)
	if err != nil {
		return nil, err
	}
	res, err := s.broker.ReadQueue(q, off, broker.ReadOptions{MaxRecords: 1})
	if err != nil {
		return nil, err
	}
	defer res.Release()
	if len(res.Records) == 0 {
		return nil, model.ErrOffsetOutOfRange
	}
	r := &res.Records[0]
	var m model.Message
	switch r.Format {
	case model.FormatMessage:
		m, err = broker.DecodeMessage(r.Payload)
	case model.FormatKafkaBatchV2:
		err = model.ErrOffsetOutOfRange
		_ = s.batches.Records(r.Payload, true, func(kr *kbatch.Record) bool {
			if r.BaseOffset+model.QueueOffset(kr.OffsetDelta) != off {
				return true
			}
			m, err = broker.KafkaRecordMessage(kr).Clone(), nil // kr's bytes live only during this call
			return false
		})
	default:
		err = model.ErrOffsetOutOfRange
	}
	if err != nil {
		return nil, err
	}
	return &found{msg: m.Clone(), topic: ref.Topic, index: ref.Index, queue: q, offset: off, storeTime: r.StoreTime}, nil
}
