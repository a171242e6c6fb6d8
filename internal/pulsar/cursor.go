package pulsar

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// subKey names a subscription on one queue.
type subKey struct {
	queue model.QueueID
	name  string
}

// subscriptions holds a server's subscriptions.
type subscriptions struct {
	s  *Server
	mu sync.Mutex
	m  map[subKey]cursor
}

func newSubscriptions(s *Server) *subscriptions {
	return &subscriptions{s: s, m: map[subKey]cursor{}}
}

// close stops every dispatcher.
func (ss *subscriptions) close() {
	ss.mu.Lock()
	list := make([]cursor, 0, len(ss.m))
	for _, sub := range ss.m {
		list = append(list, sub)
	}
	ss.mu.Unlock()
	for _, sub := range list {
		sub.stop()
	}
}

// forget drops a subscription from the registry.
func (ss *subscriptions) forget(sub cursor) {
	ss.mu.Lock()
	if ss.m[sub.base().key] == sub {
		delete(ss.m, sub.base().key)
	}
	ss.mu.Unlock()
}

// ErrConsumerBusy is a consumer the subscription cannot take.
var ErrConsumerBusy = errors.New("consumer busy")

// cursor is a subscription on one queue as its consumers use it: an
// ordered one (Exclusive, Failover) or a shared one (Shared, on POP).
type cursor interface {
	base() *subBase
	add(co *consumer, m *pulsarpb.CommandSubscribe) error
	remove(co *consumer)
	flow(co *consumer, permits int64)
	ack(co *consumer, m *pulsarpb.CommandAck)
	redeliver(co *consumer, ids []*pulsarpb.MessageIdData)
	seek(ctx context.Context, off model.QueueOffset) error
	// position is the mark-delete position: everything below is done.
	position() model.QueueOffset
	consumerCount() int
	// consumerViews describes the connected consumers (stats).
	consumerViews() []consumerView
	stop()
}

// consumerView is a connected consumer as stats show it.
type consumerView struct {
	co      *consumer
	permits int64
	unacked int
	active  bool
}

// subBase is what every subscription knows of itself.
type subBase struct {
	s          *Server
	key        subKey
	topic      model.TopicName
	index      int32 // the queue's index at this node's broker
	partition  int32 // its topic-wide index
	partitions int   // the topic's queue count when the subscription opened
	ledger     uint64
	durable    bool
	shared     bool // Shared or Key_Shared: on POP
	keyShared  bool
}

func (sb *subBase) base() *subBase { return sb }

// commit records off as the subscription's committed offset.
func (sb *subBase) commit(ctx context.Context, off model.QueueOffset) error {
	return sb.s.b.CommitOffsetsNoWait(ctx, sb.key.name, sb.topic, map[int32]broker.OffsetCommit{
		sb.index: {Queue: sb.key.queue, Offset: off, LeaderEpoch: -1}})
}

// startPosition is where a new subscription begins: its committed offset
// (a durable subscription's, shared with the group's other protocols),
// else the position asked for, committed at once when durable.
func (sb *subBase) startPosition(m *pulsarpb.CommandSubscribe) (model.QueueOffset, error) {
	b := sb.s.b
	start, hw, _, err := b.Offsets(sb.topic, sb.index)
	if err != nil {
		return 0, err
	}
	if !sb.durable {
		return startFromID(m.GetStartMessageId(), start, hw), nil
	}
	committed, err := b.FetchOffsets(sb.key.name, sb.topic)
	if err != nil {
		return 0, err
	}
	if c, ok := committed[sb.index]; ok && c.Offset >= 0 {
		return max(c.Offset, start), nil
	}
	pos := hw
	if m.GetInitialPosition() == pulsarpb.CommandSubscribe_Earliest {
		pos = start
	}
	return pos, sb.commit(context.Background(), pos)
}

// sharedType says whether a subscription type consumes through POP.
func sharedType(t pulsarpb.CommandSubscribe_SubType) bool {
	return t == pulsarpb.CommandSubscribe_Shared || t == pulsarpb.CommandSubscribe_Key_Shared
}

// attach adds a consumer, creating the subscription when it is new.
func (ss *subscriptions) attach(co *consumer, m *pulsarpb.CommandSubscribe, tg target) (cursor, error) {
	t := tg.topic
	q, _ := t.Queue(tg.index)
	k := subKey{queue: q, name: m.GetSubscription()}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sub := ss.m[k]
	keyShared := m.GetSubType() == pulsarpb.CommandSubscribe_Key_Shared
	if sub != nil && (sub.base().shared != sharedType(m.GetSubType()) || sub.base().keyShared != keyShared) {
		if sub.consumerCount() > 0 {
			return nil, fmt.Errorf("%w: subscription %s is of another type", ErrConsumerBusy, k.name)
		}
		sub.stop()
		sub = nil
	}
	if sub == nil {
		sb := subBase{s: ss.s, key: k, topic: t.Name, index: tg.index, partition: tg.partition, partitions: len(t.All), ledger: ledgerID(t),
			durable: m.GetDurable(), shared: sharedType(m.GetSubType()), keyShared: keyShared}
		var err error
		if sb.shared {
			sub, err = newSharedSub(sb, m)
		} else {
			sub, err = newOrderedSub(sb, m)
		}
		if err != nil {
			return nil, err
		}
		ss.m[k] = sub
	}
	if err := sub.add(co, m); err != nil {
		return nil, err
	}
	return sub, nil
}
