package grpcv5

// SendMessage: each message becomes a neutral message (tag, keys, user
// properties as headers, message_id as UNIQ_KEY, message_group as
// __SHARDINGKEY, born time and host), so every protocol reads it. The
// server picks the queue: by a hash of the message group for FIFO
// messages (one group stays in one queue, in order), in turn otherwise. A
// delivery_timestamp in the future goes to the timer store (the answer
// carries a recall handle); a transactional message is stored as a half
// message until EndTransaction (the answer's transaction id names it).
// Sends are durable under the storage policy before the answer.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

// Message properties with a meaning of their own.
const (
	propUniqKey      = "UNIQ_KEY"
	propShardingKey  = "__SHARDINGKEY"
	propTraceContext = "TRACE_CONTEXT"
)

// systemProperties may not be set as user properties (RocketMQ refuses
// them as ILLEGAL_MESSAGE_PROPERTY_KEY).
var systemProperties = map[string]bool{"TAGS": true, "KEYS": true, propUniqKey: true, propShardingKey: true,
	broker.HeaderDelayLevel: true, broker.HeaderTransactionPrepared: true, broker.HeaderProducerGroup: true,
	broker.HeaderRealTopic: true, broker.HeaderRealQueue: true, broker.HeaderTimerDeliverMs: true,
	broker.HeaderTimerDelaySec: true, broker.HeaderTimerDelayMs: true, broker.HeaderCheckImmunity: true,
	broker.HeaderCheckTimes: true, propTraceContext: true}

// SendMessage stores messages.
func (s *Server) SendMessage(ctx context.Context, req *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
	resp := &v2.SendMessageResponse{Status: okStatus()}
	if len(req.GetMessages()) == 0 {
		resp.Status = &v2.Status{Code: v2.Code_BAD_REQUEST, Message: "no message"}
		return resp, nil
	}
	moving := false
	for _, m := range req.GetMessages() {
		entry, err := s.sendOne(ctx, m)
		if entry.Status.Code != v2.Code_OK && resp.Status.Code == v2.Code_OK {
			resp.Status = entry.Status
		}
		moving = moving || errors.Is(err, model.ErrNotLeader)
		resp.Entries = append(resp.Entries, entry)
	}
	if moving {
		s.awaitLeaderMove(ctx)
	}
	return resp, nil
}

// leaderMoveWait bounds how long a send that found its group's leadership
// gone waits for this member's servers to stop.
const leaderMoveWait = 3 * time.Second

// awaitLeaderMove holds the answer of a send that found its group's
// leadership gone (a cluster member whose term is ending) until this
// member's servers stop: the v5 clients retry a failed send at once, and
// their retry then goes to a new connection, which reaches the new leader,
// instead of failing again here.
func (s *Server) awaitLeaderMove(ctx context.Context) {
	serving := s.serving.Load()
	if serving == nil {
		return
	}
	t := time.NewTimer(leaderMoveWait)
	defer t.Stop()
	select {
	case <-(*serving).Done():
		// The stopping server tells the client's connection to go away
		// as it stops; answering first would let the client's retry,
		// sent at once, ride the same connection to this member again.
		g := time.NewTimer(goAwayGrace)
		defer g.Stop()
		select {
		case <-g.C:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	case <-t.C:
	}
}

// untilStopped is ctx, ended also when the servers this server runs in
// stop (a cluster member's term ends, the node stops): a long wait then
// answers instead of holding the stop, which waits for every call.
func (s *Server) untilStopped(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	serving := s.serving.Load()
	if serving == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(*serving, cancel)
	return ctx, func() { stop(); cancel() }
}

// termEnded reports whether the servers this server runs in are stopping
// (a cluster member's term ended).
func (s *Server) termEnded() bool {
	serving := s.serving.Load()
	return serving != nil && (*serving).Err() != nil
}

// goAwayGrace is how long a send that found its group's leadership gone
// is held after this member's servers began to stop, so that their
// connection's go-away reaches the client before the answer does.
const goAwayGrace = 250 * time.Millisecond

// sendOne stores one message and describes the result (and the error
// when it failed).
func (s *Server) sendOne(ctx context.Context, pm *v2.Message) (*v2.SendResultEntry, error) {
	sp := pm.GetSystemProperties()
	entry := &v2.SendResultEntry{MessageId: sp.GetMessageId()}
	fail := func(err error) (*v2.SendResultEntry, error) {
		entry.Status = status(err)
		if errors.Is(err, model.ErrNotLeader) {
			// Rare (leadership moves) and worth knowing which member and
			// term answered.
			s.log.Info("send refused: not the group's leader", "topic", pm.GetTopic().GetName(),
				"term_ended", s.termEnded(), "err", err)
		} else {
			s.log.Debug("send refused", "topic", pm.GetTopic().GetName(), "err", err)
		}
		return entry, err
	}
	t, err := s.routeTopic(ctx, pm.GetTopic())
	if err != nil {
		return fail(err)
	}
	m, err := s.toMessage(pm)
	if err != nil {
		return fail(err)
	}
	if q := s.opts.Quotas; q.Active() {
		if err := q.CheckStorage(t.Name); err != nil {
			return fail(err)
		}
		if !q.Admit(t.Name, callUser(ctx), "", quota.Produce, len(pm.GetBody())) {
			return fail(statusErr(v2.Code_TOO_MANY_REQUESTS, "%s is over its produce byte rate", t.Name.Short()))
		}
	}
	idx := s.pickQueue(t, sp.GetMessageGroup())
	switch {
	case sp.GetMessageType() == v2.MessageType_TRANSACTION:
		m.Headers = append(m.Headers,
			model.Header{Key: broker.HeaderTransactionPrepared, Value: []byte("true")},
			model.Header{Key: broker.HeaderProducerGroup, Value: []byte(txnGroup(pm.GetTopic()))})
		if d := sp.GetOrphanedTransactionRecoveryDuration(); d != nil {
			m.Headers = append(m.Headers, model.Header{Key: broker.HeaderCheckImmunity, Value: []byte(strconv.FormatInt(int64(d.AsDuration()/time.Second), 10))})
		}
	case sp.GetDeliveryTimestamp() != nil:
		due := sp.GetDeliveryTimestamp().AsTime().UnixMilli()
		m.Headers = append(m.Headers, model.Header{Key: broker.HeaderTimerDeliverMs, Value: []byte(strconv.FormatInt(due, 10))})
	}
	start := time.Now()
	pub, err := s.broker.Publish(broker.WithTraceSource(ctx, "grpc", clientID(ctx)), t, idx, []model.Message{m})
	if err != nil {
		return fail(err)
	}
	entry.Offset = int64(pub.Offsets[0])
	if s.opts.Tracer.Enabled() {
		// The client's trace context: a traceparent property, else the
		// system property the v5 clients carry it in.
		parent := pm.GetUserProperties()[telemetry.HeaderTraceParent]
		if parent == "" {
			parent = sp.GetTraceContext()
		}
		s.opts.Tracer.Start(ctx, "send "+pm.GetTopic().GetName(), parent, trace.SpanKindServer, start,
			attribute.String("messaging.system", "rocketmq"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", pm.GetTopic().GetName()), attribute.String("messaging.message.id", sp.GetMessageId()),
			attribute.Int64("messaging.rocketmq.queue_offset", entry.Offset)).End()
	}
	switch pub.Kind {
	case broker.PublishedHalf:
		entry.TransactionId = transactionID(pub.Offsets[0])
	case broker.PublishedTimer:
		if pub.Due > s.broker.Now().UnixMilli() {
			entry.RecallHandle = broker.RecallHandle(pm.GetTopic().GetName(), s.opts.BrokerName, pub.Due, sp.GetMessageId())
		}
	}
	entry.Status = okStatus()
	return entry, nil
}

// toMessage converts and validates a sent message.
func (s *Server) toMessage(pm *v2.Message) (model.Message, error) {
	sp := pm.GetSystemProperties()
	if sp.GetMessageId() == "" {
		return model.Message{}, statusErr(v2.Code_ILLEGAL_MESSAGE_ID, "message id required")
	}
	body := pm.GetBody()
	var flags uint32
	if sp.GetBodyEncoding() == v2.Encoding_GZIP {
		switch {
		case len(body) > 1 && body[0] == 0x78: // zlib, as remoting producers compress
			flags |= model.FlagCompressedBody
		case len(body) > 1 && body[0] == 0x1f && body[1] == 0x8b:
			plain, err := gunzip(body, int64(s.opts.MaxBodyBytes))
			if err != nil {
				return model.Message{}, statusErr(v2.Code_MESSAGE_CORRUPTED, "gzip body: %v", err)
			}
			body = plain
		}
	}
	if len(body) > int(s.opts.MaxBodyBytes) {
		return model.Message{}, statusErr(v2.Code_MESSAGE_BODY_TOO_LARGE, "body of %d bytes exceeds %d", len(body), s.opts.MaxBodyBytes)
	}
	m := model.Message{Body: body, Flags: flags, Tags: sp.GetTag(), BornHost: sp.GetBornHost(),
		BornTime: sp.GetBornTimestamp().AsTime().UnixMilli()}
	if sp.GetBornTimestamp() == nil {
		m.BornTime = 0
	}
	if keys := sp.GetKeys(); len(keys) > 0 {
		m.Key = []byte(strings.Join(keys, " "))
		m.IndexKeys = append(m.IndexKeys, keys...)
	}
	m.IndexKeys = append(m.IndexKeys, sp.GetMessageId())
	props := make([]string, 0, len(pm.GetUserProperties()))
	for k := range pm.GetUserProperties() {
		if systemProperties[k] {
			return model.Message{}, statusErr(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property %s is reserved", k)
		}
		props = append(props, k)
	}
	slices.Sort(props)
	for _, k := range props {
		m.Headers = append(m.Headers, model.Header{Key: k, Value: []byte(pm.GetUserProperties()[k])})
	}
	m.Headers = append(m.Headers, model.Header{Key: propUniqKey, Value: []byte(sp.GetMessageId())})
	if g := sp.GetMessageGroup(); g != "" {
		m.Headers = append(m.Headers, model.Header{Key: propShardingKey, Value: []byte(g)})
	}
	if tc := sp.GetTraceContext(); tc != "" {
		m.Headers = append(m.Headers, model.Header{Key: propTraceContext, Value: []byte(tc)})
	}
	return m, nil
}

// pickQueue chooses the queue of a sent message.
func (s *Server) pickQueue(t *broker.Topic, group string) int32 {
	n := uint32(t.QueueCount())
	if group != "" {
		h := fnv.New32a()
		h.Write([]byte(group))
		return int32(h.Sum32() % n)
	}
	return int32(s.roundRobin.Add(1) % n)
}

// gunzip inflates a gzip body, at most limit bytes.
func gunzip(b []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err == nil && int64(len(out)) > limit {
		err = errors.New("inflates past the body limit")
	}
	return out, err
}
