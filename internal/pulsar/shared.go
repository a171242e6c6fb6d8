package pulsar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// Shared subscriptions consume through the POP engine, as RocketMQ's POP
// consumers and every other protocol's queue-like consumers do (group =
// subscription name): each message is leased to one consumer at a time
// and kept by it until acknowledged. Leases are renewed while their
// consumer is connected; a consumer leaving (closing, disconnecting, its
// broker failing over) or asking for redelivery gives its messages back
// to the others, counted in redelivery_count. Each message is delivered
// as an entry of its own: entryId is its queue offset. Key_Shared rides
// on the same leases, routing each message to its key's consumer
// (keyshared.go).

// Lease times: a held message's lease is renewed once half of it is left.
const (
	sharedLease       = time.Minute
	sharedRenewPeriod = 10 * time.Second
)

// sharedSub is a Shared subscription on one queue.
type sharedSub struct {
	subBase
	pop *pop.Engine

	mu        sync.Mutex
	consumers []*consumer // sorted by priority
	turn      int         // round robin among those with permits
	router    keyRouter   // Key_Shared

	ids     idCache // the dispatcher's
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}
}

// ErrNoPop is a Shared subscription on a server without a POP engine.
var ErrNoPop = errors.New("shared subscriptions are not served here")

// newSharedSub opens a Shared subscription; a new durable one starts at
// its committed offset or initial position, where the POP engine starts
// the group.
func newSharedSub(sb subBase, m *pulsarpb.CommandSubscribe) (*sharedSub, error) {
	if sb.s.opts.Pop == nil {
		return nil, ErrNoPop
	}
	sub := &sharedSub{subBase: sb, pop: sb.s.opts.Pop, wake: make(chan struct{}, 1)}
	pos, err := sub.startPosition(m)
	if err != nil {
		return nil, err
	}
	if !sb.durable {
		// A non-durable subscription starts anew each time (POP state
		// is kept by name: moved to the start position).
		if err := sub.pop.Reset(context.Background(), sb.key.name, sb.key.queue, pos); err != nil {
			return nil, err
		}
		return sub, nil
	}
	// Messages still out were handed out before this server served the
	// queue (by the member that led its group before, or this node before
	// a restart): their consumers' connections are gone, so they go to the
	// consumers now, as Pulsar redelivers a departed consumer's messages
	// (acknowledgements of them still count: ack).
	held, err := sub.pop.Leases(sb.key.name, sb.key.queue)
	if err != nil {
		return nil, err
	}
	back := make(map[model.QueueOffset]pop.Handle, len(held))
	for _, h := range held {
		back[h.Offset] = h
	}
	sub.release(back)
	return sub, nil
}

func (sub *sharedSub) add(co *consumer, m *pulsarpb.CommandSubscribe) error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.keyShared {
		ranges, err := stickyRanges(m.GetKeySharedMeta(), sub.consumers)
		if err != nil {
			return err
		}
		co.sticky = ranges
		if ranges == nil && !sub.router.add(co) {
			return fmt.Errorf("%w: no Key_Shared hash range is left to split", ErrConsumerBusy)
		}
	}
	co.held = map[model.QueueOffset]pop.Handle{}
	sub.consumers = append(sub.consumers, co)
	slices.SortStableFunc(sub.consumers, func(a, b *consumer) int { return int(a.priority - b.priority) })
	if !sub.running {
		ctx, cancel := context.WithCancel(context.Background())
		sub.running, sub.cancel, sub.done = true, cancel, make(chan struct{})
		go func() {
			defer close(sub.done)
			sub.dispatch(ctx)
		}()
	}
	return nil
}

// remove drops a consumer and gives its messages to the others.
func (sub *sharedSub) remove(co *consumer) {
	sub.mu.Lock()
	i := slices.Index(sub.consumers, co)
	if i >= 0 {
		sub.consumers = slices.Delete(sub.consumers, i, i+1)
		sub.router.remove(co)
	}
	held := co.held
	co.held, co.pending = map[model.QueueOffset]pop.Handle{}, nil
	last := len(sub.consumers) == 0
	sub.mu.Unlock()
	sub.release(held)
	if last {
		sub.stop()
		if !sub.durable {
			sub.s.subs.forget(sub)
		}
	}
	sub.poke()
}

// release makes messages visible to the group again at once.
func (sub *sharedSub) release(held map[model.QueueOffset]pop.Handle) {
	ctx := context.Background()
	for _, h := range held {
		if _, err := sub.pop.ChangeInvisible(ctx, sub.key.name, h, 0); err != nil && !errors.Is(err, pop.ErrStaleHandle) {
			sub.s.log.Warn("pulsar: releasing a message", "subscription", sub.key.name, "offset", h.Offset, "err", err)
		}
	}
}

func (sub *sharedSub) flow(co *consumer, permits int64) {
	sub.mu.Lock()
	co.permits += permits
	sub.mu.Unlock()
	sub.poke()
}

// ack acknowledges messages individually (Shared has no cumulative acks).
// A message the consumer does not hold — handed out before a reconnect,
// to it or to another consumer of the subscription — is acknowledged by
// its position, as Pulsar's cursors take acknowledgements.
func (sub *sharedSub) ack(co *consumer, m *pulsarpb.CommandAck) {
	ctx := context.Background()
	var handles []pop.Handle
	var elsewhere []model.QueueOffset
	sub.mu.Lock()
	for _, id := range m.GetMessageId() {
		off := model.QueueOffset(id.GetEntryId())
		if h, ok := co.held[off]; ok {
			handles = append(handles, h)
			delete(co.held, off)
		} else {
			elsewhere = append(elsewhere, off)
		}
	}
	sub.mu.Unlock()
	if len(elsewhere) > 0 {
		held, err := sub.pop.Leases(sub.key.name, sub.key.queue, elsewhere...)
		if err != nil {
			sub.s.log.Warn("pulsar: acknowledging", "subscription", sub.key.name, "err", err)
		}
		handles = append(handles, held...)
	}
	for _, h := range handles {
		if err := sub.pop.Ack(ctx, sub.key.name, h); err != nil && !errors.Is(err, pop.ErrStaleHandle) {
			sub.s.log.Warn("pulsar: acknowledging", "subscription", sub.key.name, "offset", h.Offset, "err", err)
		}
	}
}

// redeliver gives back the messages named (all the consumer holds when
// none are).
func (sub *sharedSub) redeliver(co *consumer, ids []*pulsarpb.MessageIdData) {
	sub.mu.Lock()
	back := map[model.QueueOffset]pop.Handle{}
	if len(ids) == 0 {
		back, co.held, co.pending = co.held, map[model.QueueOffset]pop.Handle{}, nil
	}
	for _, id := range ids {
		off := model.QueueOffset(id.GetEntryId())
		if h, ok := co.held[off]; ok {
			back[off] = h
			delete(co.held, off)
		}
	}
	sub.mu.Unlock()
	sub.release(back)
	sub.poke()
}

// seek moves the group to off: everything from it is delivered again.
func (sub *sharedSub) seek(ctx context.Context, off model.QueueOffset) error {
	sub.mu.Lock()
	for _, co := range sub.consumers {
		co.held, co.pending = map[model.QueueOffset]pop.Handle{}, nil
	}
	sub.mu.Unlock()
	if err := sub.pop.Reset(ctx, sub.key.name, sub.key.queue, off); err != nil {
		return err
	}
	return sub.commit(ctx, off)
}

// position is the group's POP base on the queue (everything below is
// done), else its committed offset.
func (sub *sharedSub) position() model.QueueOffset {
	for _, p := range sub.pop.Progress(sub.key.name, 0) {
		if p.Queue == sub.key.queue {
			return p.Base
		}
	}
	got, err := sub.s.b.FetchOffsets(sub.key.name, sub.topic)
	if err != nil {
		return 0
	}
	return got[sub.index].Offset
}

func (sub *sharedSub) consumerCount() int {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return len(sub.consumers)
}

func (sub *sharedSub) consumerViews() []consumerView {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	out := make([]consumerView, 0, len(sub.consumers))
	for _, co := range sub.consumers {
		out = append(out, consumerView{co: co, permits: co.permits, unacked: len(co.held) - len(co.pending), active: true})
	}
	return out
}

func (sub *sharedSub) poke() {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *sharedSub) stop() {
	sub.mu.Lock()
	running, cancel, done := sub.running, sub.cancel, sub.done
	sub.running = false
	sub.mu.Unlock()
	if running {
		cancel()
		<-done
	}
}

// maxPending bounds the messages Key_Shared consumers wait to get.
const maxPending = 1000

// next picks the consumer whose turn it is among those of the best
// priority with permits (Key_Shared: how many messages to take for all
// of them, the first consumer with permits standing for them).
func (sub *sharedSub) next() (*consumer, int64) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.keyShared {
		var first *consumer
		permits, pending := int64(0), 0
		for _, co := range sub.consumers {
			pending += len(co.pending)
			if co.permits > 0 {
				permits += co.permits
				if first == nil {
					first = co
				}
			}
		}
		if pending >= maxPending {
			return nil, 0
		}
		return first, permits
	}
	best := int32(-1)
	var ready []*consumer
	for _, co := range sub.consumers {
		if co.permits <= 0 {
			continue
		}
		if best < 0 || co.priority == best {
			best = co.priority
			ready = append(ready, co)
		}
	}
	if len(ready) == 0 {
		return nil, 0
	}
	sub.turn++
	co := ready[sub.turn%len(ready)]
	return co, co.permits
}

// dispatch hands messages to consumers with permits, one consumer's
// share at a time, and renews what they hold.
func (sub *sharedSub) dispatch(ctx context.Context) {
	renew := time.NewTicker(sharedRenewPeriod)
	defer renew.Stop()
	for ctx.Err() == nil {
		select {
		case <-renew.C:
			sub.renew(ctx)
		default:
		}
		if sub.keyShared {
			sub.sendPending()
		}
		co, permits := sub.next()
		if co == nil {
			select {
			case <-ctx.Done():
			case <-sub.wake:
			case <-renew.C:
				sub.renew(ctx)
			}
			continue
		}
		_, hw, _, err := sub.s.b.Offsets(sub.topic, sub.index)
		var got []pop.Delivery
		if err == nil {
			got, err = sub.pop.Receive(ctx, sub.key.name, []model.QueueID{sub.key.queue}, int(min(permits, 64)), sharedLease, false, nil)
		}
		if err != nil {
			if ctx.Err() == nil {
				sub.s.log.Warn("pulsar: receiving for a shared subscription", "subscription", sub.key.name, "err", err)
			}
			sleepOrWake(ctx, sub.wake, time.Second)
			continue
		}
		if len(got) == 0 {
			// Leases that expire (a consumer lost without a word) come
			// back within a second; messages given back at once.
			waitOrWake(ctx, sub.s.b, sub.wake, time.Second, broker.Watch{Topic: sub.topic, Index: sub.index, Offset: hw, Stable: true})
			continue
		}
		if sub.keyShared {
			sub.route(got)
		} else {
			sub.hand(co, got)
		}
	}
}

// route gives each delivery to the consumer its key belongs to, sending
// what permits allow; a key no consumer covers comes back a second later.
func (sub *sharedSub) route(got []pop.Delivery) {
	var later []pop.Handle
	sub.mu.Lock()
	for i := range got {
		d := got[i]
		co := sub.router.owner(sub.consumers, keyHash(stickyKey(&d.Message)))
		if co == nil {
			later = append(later, d.Handle)
			continue
		}
		co.held[d.Offset] = d.Handle
		co.pending = append(co.pending, d)
	}
	sub.mu.Unlock()
	for _, h := range later {
		_, _ = sub.pop.ChangeInvisible(context.Background(), sub.key.name, h, time.Second)
	}
	sub.sendPending()
}

// sendPending sends Key_Shared consumers what waits for them, as their
// permits allow.
func (sub *sharedSub) sendPending() {
	type out struct {
		co *consumer
		ds []pop.Delivery
	}
	var sends []out
	sub.mu.Lock()
	for _, co := range sub.consumers {
		n := int(min(int64(len(co.pending)), max(co.permits, 0)))
		if n == 0 {
			continue
		}
		sends = append(sends, out{co, co.pending[:n:n]})
		co.pending = co.pending[n:]
		co.permits -= int64(n)
	}
	sub.mu.Unlock()
	for _, o := range sends {
		for i := range o.ds {
			d := &o.ds[i]
			e := sub.messageEntry(d)
			o.co.sendEntry(&sub.subBase, &e, nil, d.Attempt-1)
		}
	}
}

// hand sends deliveries to co, or gives them back when it left.
func (sub *sharedSub) hand(co *consumer, got []pop.Delivery) {
	var back map[model.QueueOffset]pop.Handle
	sub.mu.Lock()
	gone := !slices.Contains(sub.consumers, co)
	for i := range got {
		d := &got[i]
		if gone {
			if back == nil {
				back = map[model.QueueOffset]pop.Handle{}
			}
			back[d.Offset] = d.Handle
			continue
		}
		co.held[d.Offset] = d.Handle
		co.permits--
	}
	sub.mu.Unlock()
	if gone {
		sub.release(back)
		return
	}
	for i := range got {
		d := &got[i]
		e := sub.messageEntry(d)
		co.sendEntry(&sub.subBase, &e, nil, d.Attempt-1)
	}
}

// renew extends the leases of held messages with half their time left.
func (sub *sharedSub) renew(ctx context.Context) {
	now := time.Now().UnixMilli()
	type held struct {
		co *consumer
		h  pop.Handle
	}
	var due []held
	sub.mu.Lock()
	for _, co := range sub.consumers {
		for _, h := range co.held {
			if h.Deadline-now < sharedLease.Milliseconds()/2 {
				due = append(due, held{co, h})
			}
		}
	}
	sub.mu.Unlock()
	for _, d := range due {
		if err := sub.pop.Renew(ctx, sub.key.name, d.h, sharedLease); err != nil {
			continue // acknowledged or given back meanwhile
		}
		sub.mu.Lock()
		if h, ok := d.co.held[d.h.Offset]; ok && h.Gen == d.h.Gen {
			h.Deadline = now + sharedLease.Milliseconds()
			d.co.held[d.h.Offset] = h
		}
		sub.mu.Unlock()
	}
}

// waitOrWake parks until the watched queue has data, a wake-up or d.
func waitOrWake(ctx context.Context, b *broker.Broker, wake chan struct{}, d time.Duration, w broker.Watch) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-wake: // the dispatcher's loop looks at everything again
			cancel()
		case <-wctx.Done():
		}
	}()
	_ = b.Wait(wctx, []broker.Watch{w})
	cancel()
	<-done
}

// sleepOrWake waits d or a wake-up.
func sleepOrWake(ctx context.Context, wake chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}

// idCache remembers the stored batch a delivery came from, so the
// messages of one Pulsar batch find their producer's identity with one read.
type idCache struct {
	base, end model.QueueOffset
	id        identity
	ok        bool
}

// identityAt is the producer identity of the batch holding offset off.
func (sub *sharedSub) identityAt(off model.QueueOffset) (identity, bool) {
	c := &sub.ids
	if off >= c.base && off < c.end {
		return c.id, c.ok
	}
	res, err := sub.s.b.Read(sub.topic, sub.index, off, readOne())
	if err != nil {
		return identity{}, false
	}
	defer res.Release()
	for i := range res.Records {
		r := &res.Records[i]
		if off >= r.BaseOffset && off < r.BaseOffset+model.QueueOffset(r.Count) {
			c.base, c.end = r.BaseOffset, r.BaseOffset+model.QueueOffset(r.Count)
			c.id, c.ok = parseIdentity(r)
			return c.id, c.ok
		}
	}
	return identity{}, false
}

// messageEntry is a delivery as an entry of its own, with its Pulsar
// producer's name and publish time when a Pulsar producer wrote it.
func (sub *sharedSub) messageEntry(d *pop.Delivery) entry {
	m := &d.Message
	e := entry{base: d.Offset, count: 1, storeTime: d.StoreTime, publishTime: d.StoreTime, producer: m.Producer, sequence: uint64(d.Offset)}
	smm := messageMetadata(m)
	if id, ok := sub.identityAt(d.Offset); ok {
		e.producer, e.sequence = id.name, id.first+uint64(d.Offset-sub.ids.base)
		if id.publish > 0 {
			e.publishTime = int64(id.publish)
		}
		if !id.hasEventTime(int(d.Offset - sub.ids.base)) {
			smm.hasEventTime = false
		}
	}
	e.payload = appendSingle(nil, smm, m.Body)
	return e
}
