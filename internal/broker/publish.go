package broker

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
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
	if pub, held, err := b.publishHeld(ctx, t, index, msgs); held || err != nil {
		return pub, err
	}
	offs, err := b.AppendMessages(ctx, t.Name, index, msgs)
	return Published{Kind: PublishedNow, Queue: t.Queues[index], Offsets: offs}, err
}

// publishHeld stores a single message that waits before it is readable —
// a transactional half message, a delay level or a timer — and says
// whether it was one.
func (b *Broker) publishHeld(ctx context.Context, t *Topic, index int32, msgs []model.Message) (Published, bool, error) {
	if len(msgs) != 1 {
		return Published{}, false, nil
	}
	m := msgs[0]
	if v, ok := m.Header(HeaderTransactionPrepared); ok && string(v) == "true" {
		off, err := b.AppendHalf(ctx, t.Name, index, m)
		return Published{Kind: PublishedHalf, Queue: b.HalfQueue(), Offsets: []model.QueueOffset{off}}, true, err
	}
	if v, ok := m.Header(HeaderDelayLevel); ok {
		if level, _ := strconv.Atoi(string(v)); level > 0 {
			q, off, err := b.AppendDelayed(ctx, t.Name, index, m, level)
			return Published{Kind: PublishedDelayed, Queue: q, Offsets: []model.QueueOffset{off}}, true, err
		}
	}
	due, ok, err := TimerDeliverAt(&m, b.Now())
	if err != nil {
		return Published{}, true, err
	}
	if ok {
		q, off, err := b.AppendTimer(ctx, t.Name, index, m, due)
		return Published{Kind: PublishedTimer, Queue: q, Offsets: []model.QueueOffset{off}, Due: due}, true, err
	}
	return Published{}, false, nil
}

// PublishCall is one producer request of a PublishAll: its messages for
// queue Index of Topic, and what became of them.
type PublishCall struct {
	Topic *Topic
	Index int32
	Msgs  []model.Message
	Pub   Published
	Err   error
}

// PublishAll publishes the messages of several requests (those of one
// connection that arrived together) as Publish would each, but appends
// the ones readable at once in one storage append. Each call is checked
// on its own first, so a refused call does not fail the others; an
// append that fails fails every call in it.
func (b *Broker) PublishAll(ctx context.Context, calls []PublishCall) {
	total, payload, keys, keyBytes := 0, 0, 0, 0
	for i := range calls {
		total += len(calls[i].Msgs)
		for j := range calls[i].Msgs {
			m := &calls[i].Msgs[j]
			payload += encodedLen(m)
			keys += 1 + len(m.IndexKeys)
			for _, k := range m.IndexKeys {
				keyBytes += len(k)
			}
		}
	}
	// A few allocations for every call's records, their bytes and offsets.
	arena := newRecordArena(payload, keys, keyBytes)
	slab := make([]storage.Record, total)
	recs := make([]*storage.Record, 0, total)
	offs := make([]model.QueueOffset, total)
	var now []int // the calls appended together, in order
	stamp := b.opts.Now().UnixMilli()
	for i := range calls {
		c := &calls[i]
		pub, held, err := b.publishHeld(ctx, c.Topic, c.Index, c.Msgs)
		if held || err != nil {
			c.Pub, c.Err = pub, err
			continue
		}
		id, t, err := b.appendQueue(c.Topic.Name, c.Index)
		if errors.Is(err, model.ErrQueueMoved) {
			// Its records are in another group now: appended there alone.
			offs, err := b.AppendMessages(ctx, c.Topic.Name, c.Index, c.Msgs)
			c.Pub, c.Err = Published{Kind: PublishedNow, Queue: id, Offsets: offs}, err
			continue
		}
		if err != nil {
			c.Err = err
			continue
		}
		first := len(recs)
		for j := range c.Msgs {
			r := &slab[len(recs)]
			messageRecordIn(r, &c.Msgs[j], stamp, arena)
			r.Queue = id
			if err = topicLimit(t, r); err == nil {
				err = b.engine.Check(r)
			}
			if err != nil {
				break
			}
			recs = append(recs, r)
		}
		if err != nil {
			c.Err, recs = err, recs[:first]
			continue
		}
		c.Pub = Published{Kind: PublishedNow, Queue: id}
		now = append(now, i)
	}
	err := b.engine.AppendWith(ctx, recs, storage.AppendOptions{})
	next := 0
	for _, i := range now {
		c := &calls[i]
		if c.Err = err; err == nil {
			c.Pub.Offsets = offs[next : next+len(c.Msgs) : next+len(c.Msgs)]
			for j := range c.Pub.Offsets {
				c.Pub.Offsets[j] = recs[next+j].BaseOffset
			}
		}
		next += len(c.Msgs)
	}
	for i := range calls {
		if c := &calls[i]; c.Err == nil && b.Traced(c.Topic, "") {
			b.tracePublished(ctx, c.Topic, c.Index, c.Msgs, c.Pub)
		}
	}
}
