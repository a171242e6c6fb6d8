package pulsar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// Exclusive and Failover subscriptions consume a queue in order, as Kafka
// groups and RocketMQ clustering consumers do: one active consumer per
// queue gets the entries from the subscription's read position, and the
// mark-delete position — every message below it acknowledged — is the
// subscription's committed offset in the broker's offset store (group =
// subscription name), durable and replicated like a Kafka group's. Acks
// out of order are kept above it until the gap closes. A redelivery
// request, or a new active consumer, rewinds reading to the mark-delete
// position; messages acknowledged individually are skipped (or, inside a
// batch, masked with the entry's ack set).

// subscription is an ordered subscription's state on one queue.
type subscription struct {
	subBase
	subType pulsarpb.CommandSubscribe_SubType

	mu         sync.Mutex
	consumers  []*consumer // sorted by priority, then name
	active     *consumer
	markDelete model.QueueOffset
	readPos    model.QueueOffset
	acked      map[model.QueueOffset]bool  // acknowledged at or above markDelete
	inflight   map[model.QueueOffset]int   // delivered entries not yet acknowledged: base → count
	redelivers map[model.QueueOffset]int32 // entry base → times redelivered
	running    bool
	perEntry   atomic.Int64 // messages in the last entry sent: how many entries a read asks for
	cancel     context.CancelFunc
	done       chan struct{}
	wake       chan struct{}
}

// newOrderedSub opens an ordered subscription at its start position.
func newOrderedSub(sb subBase, m *pulsarpb.CommandSubscribe) (*subscription, error) {
	sub := &subscription{subBase: sb, subType: m.GetSubType(), acked: map[model.QueueOffset]bool{},
		inflight: map[model.QueueOffset]int{}, redelivers: map[model.QueueOffset]int32{}, wake: make(chan struct{}, 1)}
	pos, err := sb.startPosition(m)
	if err != nil {
		return nil, err
	}
	sub.markDelete, sub.readPos = pos, pos
	return sub, nil
}

// position is the mark-delete position.
func (sub *subscription) position() model.QueueOffset {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.markDelete
}

func (sub *subscription) consumerCount() int {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return len(sub.consumers)
}

func (sub *subscription) consumerViews() []consumerView {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	out := make([]consumerView, 0, len(sub.consumers))
	for _, co := range sub.consumers {
		v := consumerView{co: co, permits: co.permits, active: co == sub.active}
		if v.active {
			for _, n := range sub.inflight {
				v.unacked += n
			}
		}
		out = append(out, v)
	}
	return out
}

// typeName is the subscription type as stats name it.
func (sub *subscription) typeName() string {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.subType.String()
}

// flow adds permits.
func (sub *subscription) flow(co *consumer, permits int64) {
	sub.mu.Lock()
	co.permits += permits
	sub.mu.Unlock()
	sub.poke()
}

// startFromID is the offset a reader starting at id reads from.
func startFromID(id *pulsarpb.MessageIdData, start, hw model.QueueOffset) model.QueueOffset {
	switch {
	case id == nil || int64(id.GetLedgerId()) == int64(^uint64(0)>>1):
		return hw // latest
	case int64(id.GetLedgerId()) < 0 || int64(id.GetEntryId()) < 0:
		return start // earliest
	}
	return min(max(model.QueueOffset(id.GetEntryId()), start), hw)
}

// add takes a consumer by the subscription type's rules.
func (sub *subscription) add(co *consumer, m *pulsarpb.CommandSubscribe) error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.consumers) > 0 && m.GetSubType() != sub.subType {
		return fmt.Errorf("%w: subscription %s is of another type", ErrConsumerBusy, sub.key.name)
	}
	sub.subType = m.GetSubType()
	if sub.subType == pulsarpb.CommandSubscribe_Exclusive && len(sub.consumers) > 0 {
		return ErrConsumerBusy
	}
	sub.consumers = append(sub.consumers, co)
	slices.SortStableFunc(sub.consumers, func(a, b *consumer) int {
		if a.priority != b.priority {
			return int(a.priority - b.priority)
		}
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	sub.chooseActiveLocked()
	if !sub.running {
		sub.start()
	}
	return nil
}

// remove drops a consumer; the last one stops the dispatcher.
func (sub *subscription) remove(co *consumer) {
	sub.mu.Lock()
	i := slices.Index(sub.consumers, co)
	if i < 0 {
		sub.mu.Unlock()
		return
	}
	sub.consumers = slices.Delete(sub.consumers, i, i+1)
	sub.chooseActiveLocked()
	last := len(sub.consumers) == 0
	sub.mu.Unlock()
	if last {
		sub.stop()
		if !sub.durable {
			sub.s.subs.forget(sub)
		}
	}
}

// chooseActiveLocked picks the active consumer (Failover: by priority and
// name, spread over a partitioned topic's partitions as Pulsar does) and,
// when it changes, tells every consumer and rewinds to the mark-delete
// position so the new one gets what the old one did not acknowledge.
func (sub *subscription) chooseActiveLocked() {
	var next *consumer
	if len(sub.consumers) > 0 {
		// Among the consumers of the best priority level.
		n := 1
		for n < len(sub.consumers) && sub.consumers[n].priority == sub.consumers[0].priority {
			n++
		}
		i := 0
		if sub.partitions > 1 {
			i = int(sub.index) % n
		}
		next = sub.consumers[i]
	}
	if next == sub.active {
		return
	}
	sub.active = next
	sub.rewindLocked()
	if sub.subType == pulsarpb.CommandSubscribe_Failover {
		for _, co := range sub.consumers {
			co.c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(),
				ActiveConsumerChange: &pulsarpb.CommandActiveConsumerChange{ConsumerId: proto.Uint64(co.id), IsActive: proto.Bool(co == next)}})
		}
	}
	sub.poke()
}

// rewindLocked makes every unacknowledged delivered entry go out again.
func (sub *subscription) rewindLocked() {
	for base := range sub.inflight {
		sub.redelivers[base]++
	}
	clear(sub.inflight)
	sub.readPos = sub.markDelete
}

// poke wakes the dispatcher.
func (sub *subscription) poke() {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *subscription) start() {
	ctx, cancel := context.WithCancel(context.Background())
	sub.running, sub.cancel, sub.done = true, cancel, make(chan struct{})
	go func() {
		defer close(sub.done)
		sub.dispatch(ctx)
	}()
}

func (sub *subscription) stop() {
	sub.mu.Lock()
	running, cancel, done := sub.running, sub.cancel, sub.done
	sub.running = false
	sub.mu.Unlock()
	if running {
		cancel()
		<-done
	}
}

// dispatch sends entries to the active consumer while it has permits.
func (sub *subscription) dispatch(ctx context.Context) {
	for ctx.Err() == nil {
		sub.mu.Lock()
		co, pos := sub.active, sub.readPos
		permits := int64(0)
		if co != nil {
			permits = co.permits
		}
		sub.mu.Unlock()
		if co == nil || permits <= 0 {
			select {
			case <-ctx.Done():
			case <-sub.wake:
			}
			continue
		}
		sent, next, err := sub.deliver(co, pos, permits)
		if err != nil {
			sub.s.log.Warn("pulsar: reading for a subscription", "topic", sub.topic.String(), "queue", sub.index,
				"subscription", sub.key.name, "err", err)
			sub.sleep(ctx, time.Second)
			continue
		}
		if sent == 0 && next == pos {
			sub.waitData(ctx, pos)
		}
	}
}

// sleep waits d or a wake-up.
func (sub *subscription) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-sub.wake:
	case <-t.C:
	}
}

// waitData parks until the queue has data past pos or something changes.
func (sub *subscription) waitData(ctx context.Context, pos model.QueueOffset) {
	waitOrWake(ctx, sub.s.b, sub.wake, 5*time.Second, broker.Watch{Topic: sub.topic, Index: sub.index, Offset: pos, Stable: true})
}

// deliver reads from pos and sends what co's permits allow; it returns
// the messages sent and the read position after them.
func (sub *subscription) deliver(co *consumer, pos model.QueueOffset, permits int64) (int, model.QueueOffset, error) {
	b := sub.s.b
	q, _, err := b.QueueID(sub.topic, sub.index)
	if err != nil {
		return 0, pos, err
	}
	_, hw, _, err := b.Offsets(sub.topic, sub.index)
	if err != nil {
		return 0, pos, err
	}
	stable := b.LastStable(q, hw)
	if pos >= stable {
		return 0, pos, nil
	}
	// As many entries as the permits take (each read checks every
	// entry it returns), by the messages the last entries held.
	perEntry := max(sub.perEntry.Load(), 1)
	res, err := b.Read(sub.topic, sub.index, pos, broker.ReadOptions{MaxRecords: int(min((permits+perEntry-1)/perEntry, 256)), MaxBytes: 1 << 20})
	if err != nil {
		if errors.Is(err, model.ErrOffsetOutOfRange) {
			start, _, _, _ := b.Offsets(sub.topic, sub.index)
			sub.mu.Lock()
			if sub.readPos == pos && pos < start {
				sub.readPos, sub.markDelete = start, max(sub.markDelete, start)
			}
			sub.mu.Unlock()
			return 0, start, nil
		}
		return 0, pos, err
	}
	defer res.Release()
	sent := 0
	next := pos
	for i := range res.Records {
		r := &res.Records[i]
		end := r.BaseOffset + model.QueueOffset(r.Count)
		if end <= pos {
			continue
		}
		if r.BaseOffset >= stable || permits <= 0 {
			break
		}
		e, ok, err := sub.s.encodeEntry(q, r)
		if err != nil {
			return sent, next, err
		}
		sub.mu.Lock()
		if sub.active != co || sub.readPos != next {
			sub.mu.Unlock() // rewound or handed over meanwhile
			return sent, next, nil
		}
		sub.readPos = end
		var ackSet []int64
		if ok {
			ackSet, ok = sub.ackSetLocked(e.base, e.count)
		}
		redelivered := sub.redelivers[e.base]
		if ok {
			sub.inflight[e.base] = e.count
			co.permits -= int64(e.count)
			permits = co.permits
		}
		sub.mu.Unlock()
		next = end
		if !ok {
			continue
		}
		co.sendEntry(&sub.subBase, &e, ackSet, redelivered)
		sent += e.count
		sub.perEntry.Store(int64(e.count))
	}
	if len(res.Records) == 0 && res.NextOffset > next {
		sub.mu.Lock()
		if sub.readPos == next {
			sub.readPos = res.NextOffset
		}
		sub.mu.Unlock()
		next = res.NextOffset
	}
	return sent, next, nil
}

// ackSetLocked returns an entry's ack set (bit i set: message i not yet
// acknowledged), nil when nothing of it is; ok is false when everything
// is.
func (sub *subscription) ackSetLocked(base model.QueueOffset, count int) ([]int64, bool) {
	if base >= sub.markDelete && len(sub.acked) == 0 {
		return nil, true
	}
	var bits []int64
	open := 0
	for i := range count {
		off := base + model.QueueOffset(i)
		if off < sub.markDelete || sub.acked[off] {
			if bits == nil {
				bits = make([]int64, (count+63)/64)
				for j := range count {
					bits[j/64] |= 1 << (j % 64)
				}
			}
			bits[i/64] &^= 1 << (i % 64)
			continue
		}
		open++
	}
	if open == 0 {
		return nil, false
	}
	return bits, true
}

// ack applies acknowledgements: cumulative up to and including id, or
// individual messages (a whole entry, or a batch's members by ack set).
func (sub *subscription) ack(_ *consumer, m *pulsarpb.CommandAck) {
	ids := m.GetMessageId()
	if !slices.IsSortedFunc(ids, byEntry) {
		// (clients group acks in no order): taken in order, each whole
		// entry moves the mark-delete position without bookkeeping.
		ids = slices.SortedFunc(slices.Values(ids), byEntry)
	}
	sizes := sub.entrySizes(ids)
	sub.mu.Lock()
	before := sub.markDelete
	for _, id := range ids {
		base := model.QueueOffset(id.GetEntryId())
		count, known := sub.inflight[base]
		if !known {
			count = sizes[base]
		}
		if m.GetAckType() == pulsarpb.CommandAck_Cumulative {
			upTo := base + model.QueueOffset(count)
			if bi := id.GetBatchIndex(); id.BatchIndex != nil && bi >= 0 && int(bi) < count-1 {
				upTo = base + model.QueueOffset(bi) + 1
			}
			sub.ackBelowLocked(upTo)
			continue
		}
		if len(id.GetAckSet()) > 0 {
			words := id.GetAckSet()
			for i := range count {
				if i/64 >= len(words) || words[i/64]&(1<<(i%64)) == 0 {
					sub.ackOneLocked(base + model.QueueOffset(i))
				}
			}
			continue
		}
		if base <= sub.markDelete {
			// The next entry in order, the common case: no bookkeeping
			// per message.
			if end := base + model.QueueOffset(count); end > sub.markDelete {
				for off := range sub.acked { // (out-of-order acks only)
					if off < end {
						delete(sub.acked, off)
					}
				}
				sub.markDelete = end
			}
		} else {
			for i := range count {
				sub.ackOneLocked(base + model.QueueOffset(i))
			}
		}
		delete(sub.inflight, base)
		delete(sub.redelivers, base)
	}
	sub.advanceLocked()
	after := sub.markDelete
	sub.mu.Unlock()
	if after > before && sub.durable {
		if err := sub.commit(context.Background(), after); err != nil {
			sub.s.log.Warn("pulsar: committing a subscription's position", "subscription", sub.key.name, "err", err)
		}
	}
}

// byEntry orders message ids by entry (and batch index).
func byEntry(a, b *pulsarpb.MessageIdData) int {
	if c := cmp.Compare(a.GetEntryId(), b.GetEntryId()); c != 0 {
		return c
	}
	return cmp.Compare(a.GetBatchIndex(), b.GetBatchIndex())
}

// entrySizes are the message counts of acknowledged entries the
// subscription does not have in flight — delivered before a rewind, or
// by the member that served the queue before this one — as the ack says
// or, since clients acknowledge a whole batch by its entry id alone, as
// the log has them: taking such an ack for one message would leave the
// batch's others unacknowledged for good, and the mark-delete position
// behind them.
func (sub *subscription) entrySizes(ids []*pulsarpb.MessageIdData) map[model.QueueOffset]int {
	var unknown []*pulsarpb.MessageIdData
	sub.mu.Lock()
	for _, id := range ids {
		base := model.QueueOffset(id.GetEntryId())
		if _, known := sub.inflight[base]; !known && base >= sub.markDelete {
			unknown = append(unknown, id)
		}
	}
	sub.mu.Unlock()
	if len(unknown) == 0 {
		return nil
	}
	sizes := make(map[model.QueueOffset]int, len(unknown))
	for _, id := range unknown {
		base := model.QueueOffset(id.GetEntryId())
		sizes[base] = max(int(id.GetBatchSize()), 1)
		if id.GetBatchSize() > 0 {
			continue
		}
		res, err := sub.s.b.Read(sub.topic, sub.index, base, readOne())
		if err != nil {
			continue
		}
		for _, r := range res.Records {
			if r.BaseOffset == base {
				sizes[base] = max(int(r.Count), 1)
			}
		}
		res.Release()
	}
	return sizes
}

func (sub *subscription) ackOneLocked(off model.QueueOffset) {
	if off >= sub.markDelete {
		sub.acked[off] = true
	}
}

func (sub *subscription) ackBelowLocked(upTo model.QueueOffset) {
	if upTo <= sub.markDelete {
		return
	}
	for off := range sub.acked {
		if off < upTo {
			delete(sub.acked, off)
		}
	}
	for base, n := range sub.inflight {
		if base+model.QueueOffset(n) <= upTo {
			delete(sub.inflight, base)
			delete(sub.redelivers, base)
		}
	}
	sub.markDelete = upTo
	sub.readPos = max(sub.readPos, upTo)
}

// advanceLocked moves the mark-delete position over acknowledged messages.
func (sub *subscription) advanceLocked() {
	for sub.acked[sub.markDelete] {
		delete(sub.acked, sub.markDelete)
		sub.markDelete++
	}
}

// redeliver sends every unacknowledged delivered message again (ordered
// subscriptions cannot redeliver single messages without breaking order).
func (sub *subscription) redeliver(*consumer, []*pulsarpb.MessageIdData) {
	sub.mu.Lock()
	sub.rewindLocked()
	sub.mu.Unlock()
	sub.poke()
}

// seek moves the subscription to offset: what is below counts as
// acknowledged, everything from it is delivered again.
func (sub *subscription) seek(ctx context.Context, off model.QueueOffset) error {
	sub.mu.Lock()
	clear(sub.acked)
	clear(sub.inflight)
	clear(sub.redelivers)
	sub.markDelete, sub.readPos = off, off
	sub.mu.Unlock()
	if sub.durable {
		return sub.commit(ctx, off)
	}
	return nil
}
