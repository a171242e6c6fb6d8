package broker

import (
	"context"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// PublishKind says where Publish put a message.
type PublishKind int

// Where a published message went.
const (
	// PublishedNow: appended to its queue, readable at once.
	PublishedNow PublishKind = iota
	// PublishedHalf: a transactional half message, waiting for its
	// producer's commit or rollback.
	PublishedHalf
	// PublishedDelayed: waiting in a RocketMQ delay level.
	PublishedDelayed
	// PublishedTimer: waiting in the timer store until its delivery time.
	PublishedTimer
)

// Published is what Publish did.
type Published struct {
	Kind PublishKind
	// Queue is the storage queue the messages were written to: the
	// topic's queue, or the half, delay-level or timer queue holding them
	// until they are due.
	Queue   model.QueueID
	Offsets []model.QueueOffset
	Due     int64 // PublishedTimer: the delivery time (ms since the epoch)
}

// Publish stores messages a producer sent to queue index of t, by the rules
// every RocketMQ-style protocol shares: a single message marked as a
// transactional half message (HeaderTransactionPrepared) waits for its
// producer's decision; a single message with a positive delay level
// (HeaderDelayLevel) waits in that level; a single message with a delivery
// time (the timer headers) waits in the timer store; anything else is
// appended now. An illegal timer header is ErrTimerIllegal.
func (b *Broker) Publish(ctx context.Context, t *Topic, index int32, msgs []model.Message) (Published, error) {
	pub, err := b.publish(ctx, t, index, msgs)
	if err == nil && b.Traced(t, "") {
		b.tracePublished(ctx, t, index, msgs, pub)
	}
	return pub, err
}

// tracePublished records a produced event per traced message.
func (b *Broker) tracePublished(ctx context.Context, t *Topic, index int32, msgs []model.Message, pub Published) {
	src := traceSource(ctx)
	for i := range msgs {
		ev := TraceEvent{Kind: TraceProduced, Protocol: src.Protocol, Client: src.Client, Group: msgs[i].Producer}
		off := model.QueueOffset(-1)
		switch pub.Kind {
		case PublishedNow:
			off = pub.Offsets[i]
		case PublishedTimer:
			ev.Detail = "waiting for its time: " + time.UnixMilli(pub.Due).UTC().Format(time.RFC3339Nano)
		case PublishedDelayed:
			v, _ := msgs[i].Header(HeaderDelayLevel)
			ev.Detail = "waiting in delay level " + string(v)
		case PublishedHalf:
			ev.Detail = "a transaction's half message, waiting for its producer's decision"
		}
		if ev.Client == "" {
			ev.Client = msgs[i].BornHost
		}
		b.TraceMessage(t, index, off, &msgs[i], ev)
	}
}

func (b *Broker) publish(ctx context.Context, t *Topic, index int32, msgs []model.Message) (Published, error) {
	if len(msgs) == 1 {
		m := msgs[0]
		if v, ok := m.Header(HeaderTransactionPrepared); ok && string(v) == "true" {
			off, err := b.AppendHalf(ctx, t.Name, index, m)
			return Published{Kind: PublishedHalf, Queue: b.HalfQueue(), Offsets: []model.QueueOffset{off}}, err
		}
		if v, ok := m.Header(HeaderDelayLevel); ok {
			if level, _ := strconv.Atoi(string(v)); level > 0 {
				q, off, err := b.AppendDelayed(ctx, t.Name, index, m, level)
				return Published{Kind: PublishedDelayed, Queue: q, Offsets: []model.QueueOffset{off}}, err
			}
		}
		due, ok, err := TimerDeliverAt(&m, b.Now())
		if err != nil {
			return Published{}, err
		}
		if ok {
			q, off, err := b.AppendTimer(ctx, t.Name, index, m, due)
			return Published{Kind: PublishedTimer, Queue: q, Offsets: []model.QueueOffset{off}, Due: due}, err
		}
	}
	offs, err := b.AppendMessages(ctx, t.Name, index, msgs)
	return Published{Kind: PublishedNow, Queue: t.Queues[index], Offsets: offs}, err
}
