// Package pop is the engine of consumption by invisibility: RocketMQ 5's
// POP (gRPC SimpleConsumer and PushConsumer, remoting POP_MESSAGE), and
// the machinery Kafka share groups (KIP-932) need. Per (group, queue) it
// hands messages out with a deadline (invisible until then) and an attempt
// count, takes acknowledgements and deadline changes by receipt handle,
// and hands a message out again once its deadline passes unacknowledged.
//
// State per (group, queue): base (every offset below is done), next (the
// first offset never handed out), the leases of messages handed out and
// not done, and the done offsets above base. base is also committed as
// the group's consumer offset, so admin tools see the group's progress and
// other protocols' consumers of the group start there.
//
// Durability: every change is a record in the internal queue
// system/internal/pop (receive, ack, deadline change), written to the log
// before the answer, so after a process crash no acknowledged message
// comes back and an unacknowledged one comes back when its deadline
// passes, as before the crash. The records do not wait for fsync: an
// operating-system crash may lose the last of them, which only makes
// messages come back sooner (at least once, never lost). A snapshot in the metadata store every
// 30 s lets the queue drop older records; a restart loads it and replays
// the queue after it.
//
// FIFO groups: a queue with a message in flight hands out nothing new, so
// the messages of one queue (hence of one message group, which the
// producer side keeps in one queue) are consumed one batch at a time, in
// order; expired ones are handed out again first.
package pop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// Errors of handles.
var (
	// ErrStaleHandle: the handle no longer names the message's current
	// lease (acknowledged, handed out again, or its deadline changed since).
	ErrStaleHandle = errors.New("receipt handle expired or already used")
)

// Options configure the engine.
type Options struct {
	SnapshotInterval time.Duration // 30 s
	Logger           *slog.Logger
	Now              func() time.Time
}

type key struct {
	group string
	queue model.QueueID
}

// lease is a message handed out and not done.
type lease struct {
	deadline int64 // ms
	attempts int32
	gen      uint32 // changes with each hand-out and deadline change
	holder   uint64 // the share group member holding it; 0 for POP
}

type state struct {
	mu       sync.Mutex
	loaded   bool
	base     model.QueueOffset
	next     model.QueueOffset
	leases   map[model.QueueOffset]*lease
	done     map[model.QueueOffset]bool
	gen      uint32
	baseSent model.QueueOffset // base last committed as the group offset
	// expiryHint is at or below the earliest lease deadline (0: unknown),
	// so share acquisitions look for ended locks only when one may be.
	expiryHint int64
}

// Delivery is one message handed out.
type Delivery struct {
	Queue     model.QueueID
	Offset    model.QueueOffset
	StoreTime int64
	Attempt   int32 // 1 on first delivery
	Handle    Handle
	Message   model.Message // owned by the delivery
}

// Engine is the POP engine of a node.
type Engine struct {
	b    *broker.Broker
	opts Options
	log  *slog.Logger
	slog *broker.StateLog

	mu     sync.Mutex
	states map[key]*state
	counts map[string]*GroupStats // per group, since start

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Filter says whether a message is for the receiving consumer; messages it
// refuses are done for the group at once (as RocketMQ's POP filters).
type Filter func(*model.Message) bool

func (e *Engine) now() int64 { return e.opts.Now().UnixMilli() }

// state returns the (group, queue) state, loading its start on first use.
func (e *Engine) state(group string, q model.QueueID) (*state, error) {
	return e.stateFrom(group, q, -1)
}

// stateFrom is state for a replayed receive: a state first met starts at
// base, where it started when the record was written (base -1: the
// group's committed offset or the queue's start, as at run time).
func (e *Engine) stateFrom(group string, q model.QueueID, base model.QueueOffset) (*state, error) {
	e.mu.Lock()
	s := e.states[key{group, q}]
	if s == nil {
		s = &state{leases: map[model.QueueOffset]*lease{}, done: map[model.QueueOffset]bool{}}
		e.states[key{group, q}] = s
	}
	e.mu.Unlock()
	s.mu.Lock()
	if !s.loaded {
		start := base
		if start < 0 {
			var err error
			if start, err = e.startOffset(group, q); err != nil {
				s.mu.Unlock()
				return nil, err
			}
		}
		s.base, s.next, s.baseSent, s.loaded = start, start, start, true
	}
	s.mu.Unlock()
	return s, nil
}

// startOffset is where a group new to a queue starts: its committed offset
// (shared with the group's other protocols), else the queue's start.
func (e *Engine) startOffset(group string, q model.QueueID) (model.QueueOffset, error) {
	ref, err := e.b.QueueByID(q)
	if err != nil {
		return 0, err
	}
	if got, err := e.b.FetchOffsets(group, ref.Topic.Name); err == nil {
		if c, ok := got[ref.Index]; ok {
			return c.Offset, nil
		}
	}
	start, _, err := e.b.QueueOffsets(q)
	return start, err
}

// Receive hands out up to max messages of group from queues (tried in the
// order given) with a deadline invisible from now: first messages whose
// deadline passed, then new ones. fifo holds back a queue with a message in
// flight.
func (e *Engine) Receive(ctx context.Context, group string, queues []model.QueueID, max int, invisible time.Duration, fifo bool, match Filter) ([]Delivery, error) {
	var out []Delivery
	for _, q := range queues {
		if len(out) >= max {
			break
		}
		got, err := e.receiveQueue(ctx, group, q, max-len(out), invisible, fifo, match)
		if err != nil {
			if errors.Is(err, model.ErrUnknownQueue) {
				continue // deleted meanwhile
			}
			return out, err
		}
		out = append(out, got...)
	}
	return out, nil
}

func (e *Engine) receiveQueue(ctx context.Context, group string, q model.QueueID, max int, invisible time.Duration, fifo bool, match Filter) ([]Delivery, error) {
	defer e.slog.Shared()() // before s.mu: a snapshot takes it exclusively, then the states
	s, err := e.state(group, q)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := e.now()
	deadline := now + invisible.Milliseconds()
	// Expired leases first, lowest offset first.
	var expired []model.QueueOffset
	inFlight := false
	for off, l := range s.leases {
		if l.deadline <= now {
			expired = append(expired, off)
		} else {
			inFlight = true
		}
	}
	if fifo && inFlight {
		return nil, nil
	}
	sort.Slice(expired, func(i, j int) bool { return expired[i] < expired[j] })
	var picks []pick
	for _, off := range expired {
		if len(picks) >= max {
			break
		}
		picks = append(picks, pick{offset: off, attempts: s.leases[off].attempts + 1})
	}
	var msgs map[model.QueueOffset]*broker.StoredMessage
	var filtered []model.QueueOffset
	next := s.next
	if len(picks) < max && !(fifo && len(expired) > 0) {
		msgs = map[model.QueueOffset]*broker.StoredMessage{}
		// Without a filter every record read is handed out: read no more
		// (each read record is decoded and checksummed).
		scan := 256
		if match == nil {
			scan = max - len(picks)
		}
		next, err = e.b.EachMessage(q, s.next, scan, func(m *broker.StoredMessage) bool {
			if match != nil && !match(&m.Message) {
				filtered = append(filtered, m.Offset)
				return true
			}
			cp := *m
			cp.Message = m.Message.Clone()
			msgs[m.Offset] = &cp
			picks = append(picks, pick{offset: m.Offset, attempts: 1})
			return len(picks) < max
		})
		if err != nil {
			return nil, err
		}
	}
	if len(picks) == 0 && next == s.next {
		return nil, nil
	}
	if again := len(picks) - len(msgs); again > 0 {
		e.count(group, func(c *GroupStats) { c.Redelivered += int64(again) })
	}
	// Record the hand-out before answering.
	rec := receiveRecord{group: group, queue: q, base: s.base, next: next, filtered: filtered}
	for i := range picks {
		s.gen++
		picks[i].gen = s.gen
		rec.leases = append(rec.leases, leaseRecord{offset: picks[i].offset, deadline: deadline, attempts: picks[i].attempts, gen: s.gen})
	}
	if err := e.write(ctx, rec.encode(), func() { e.applyReceive(s, &rec) }); err != nil {
		return nil, err
	}
	out := make([]Delivery, 0, len(picks))
	for _, p := range picks {
		sm := msgs[p.offset]
		if sm == nil { // handed out before: read it again
			if sm, err = e.readOne(q, p.offset); err != nil {
				e.log.Warn("message gone before it could be handed out again (retention)", "group", group, "queue", q, "offset", p.offset, "err", err)
				continue
			}
		}
		out = append(out, Delivery{Queue: q, Offset: p.offset, StoreTime: sm.StoreTime, Attempt: p.attempts,
			Handle: Handle{Queue: q, Offset: p.offset, Gen: p.gen, Deadline: deadline}, Message: sm.Message})
	}
	return out, nil
}

type pick struct {
	offset   model.QueueOffset
	attempts int32
	gen      uint32
}

// readOne reads the message at one offset (a copy).
func (e *Engine) readOne(q model.QueueID, off model.QueueOffset) (*broker.StoredMessage, error) {
	var got *broker.StoredMessage
	_, err := e.b.EachMessage(q, off, 1, func(m *broker.StoredMessage) bool {
		if m.Offset == off {
			cp := *m
			cp.Message = m.Message.Clone()
			got = &cp
		}
		return false
	})
	if err == nil && got == nil {
		err = fmt.Errorf("%w: no message at %d", model.ErrOffsetOutOfRange, off)
	}
	return got, err
}

// applyReceive applies a receive record; s.mu held.
func (e *Engine) applyReceive(s *state, r *receiveRecord) {
	for _, l := range r.leases {
		if l.offset < s.base || s.done[l.offset] {
			continue
		}
		s.leases[l.offset] = &lease{deadline: l.deadline, attempts: l.attempts, gen: l.gen}
		s.gen = max(s.gen, l.gen)
		s.expiryHint = min(s.expiryHint, l.deadline)
	}
	for _, off := range r.filtered {
		if off >= s.base {
			s.done[off] = true
		}
	}
	s.next = max(s.next, r.next)
	e.advance(s)
}

// advance moves base past done offsets and offsets never leased below next.
func (e *Engine) advance(s *state) {
	if len(s.leases) == 0 && len(s.done) == 0 {
		s.base = max(s.base, s.next) // nothing held: all below next is done
		return
	}
	for s.base < s.next {
		if s.done[s.base] {
			delete(s.done, s.base)
			s.base++
			continue
		}
		if _, leased := s.leases[s.base]; leased {
			return
		}
		// Below next and neither leased nor done: skipped (hidden records).
		s.base++
	}
}

// leased returns the state of a handle's queue, locked, when the handle
// names the message's current lease (ErrStaleHandle otherwise, unlocked).
// A handle without a generation (Gen 0: remoting's POP_CK, which carries
// only pop time and invisible time) names the lease by its deadline.
func (e *Engine) leased(group string, h Handle) (*state, *lease, error) {
	s, err := e.state(group, h.Queue)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	l := s.leases[h.Offset]
	if l == nil || (h.Gen != 0 && l.gen != h.Gen) || (h.Gen == 0 && l.deadline != h.Deadline) {
		s.mu.Unlock()
		return nil, nil, ErrStaleHandle
	}
	return s, l, nil
}

// Ack marks a handed-out message done (a consumer's acknowledgement, traced
// as one). A stale handle is refused.
func (e *Engine) Ack(ctx context.Context, group string, h Handle) error {
	err := e.ack(ctx, group, h)
	if err == nil {
		e.b.TraceQueue(ctx, h.Queue, h.Offset, nil, broker.TraceEvent{Kind: broker.TraceAcknowledged, Group: group})
	}
	return err
}

// ack marks a handed-out message done.
func (e *Engine) ack(ctx context.Context, group string, h Handle) error {
	defer e.slog.Shared()()
	s, l, err := e.leased(group, h)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec := ackRecord{group: group, queue: h.Queue, offset: h.Offset, gen: l.gen}
	return e.write(ctx, rec.encode(), func() { e.applyAck(s, &rec) })
}

// applyAck applies an ack record; s.mu held.
func (e *Engine) applyAck(s *state, r *ackRecord) {
	if l := s.leases[r.offset]; l != nil && l.gen == r.gen {
		delete(s.leases, r.offset)
		if r.offset >= s.base {
			s.done[r.offset] = true
		}
		e.advance(s)
	}
}

// ChangeInvisible moves a handed-out message's deadline to now+d and
// returns the new handle (the old one stops working).
func (e *Engine) ChangeInvisible(ctx context.Context, group string, h Handle, d time.Duration) (Handle, error) {
	return e.moveDeadline(ctx, group, h, d, true)
}

// Renew moves a handed-out message's deadline to now+d on behalf of its
// holder: the handle stays valid (auto-renewal of push consumers' leases).
func (e *Engine) Renew(ctx context.Context, group string, h Handle, d time.Duration) error {
	_, err := e.moveDeadline(ctx, group, h, d, false)
	return err
}

func (e *Engine) moveDeadline(ctx context.Context, group string, h Handle, d time.Duration, newGen bool) (Handle, error) {
	defer e.slog.Shared()()
	s, l, err := e.leased(group, h)
	if err != nil {
		return Handle{}, err
	}
	defer s.mu.Unlock()
	gen := l.gen
	if newGen {
		s.gen++
		gen = s.gen
	}
	rec := changeRecord{group: group, queue: h.Queue, offset: h.Offset, oldGen: l.gen, gen: gen, deadline: e.now() + d.Milliseconds()}
	if err := e.write(ctx, rec.encode(), func() { e.applyChange(s, &rec) }); err != nil {
		return Handle{}, err
	}
	return Handle{Queue: h.Queue, Offset: h.Offset, Gen: gen, Deadline: rec.deadline}, nil
}

// applyChange applies a deadline change; s.mu held.
func (e *Engine) applyChange(s *state, r *changeRecord) {
	if l := s.leases[r.offset]; l != nil && l.gen == r.oldGen {
		l.gen, l.deadline = r.gen, r.deadline
		s.gen = max(s.gen, r.gen)
		s.expiryHint = min(s.expiryHint, r.deadline)
	}
}

// Reset moves group's consumption of queue q to offset: messages from it
// are handed out again (those in flight included), those below are done.
// The group's committed offset follows with the next commit of bases.
func (e *Engine) Reset(ctx context.Context, group string, q model.QueueID, offset model.QueueOffset) error {
	rec := resetRecord{group: group, queue: q, offset: offset}
	return e.writeState(ctx, group, q, rec.encode(), func(s *state) { e.applyReset(s, &rec) })
}

// applyReset applies a reset record; s.mu held.
func (e *Engine) applyReset(s *state, r *resetRecord) {
	s.base, s.next = r.offset, r.offset
	clear(s.leases)
	clear(s.done)
	s.expiryHint = 0
}

// Forget drops group's state on queue q: leases and acknowledgements are
// forgotten, and the next receive starts from the group's committed
// offset (or the queue's start), as for a group never seen.
func (e *Engine) Forget(ctx context.Context, group string, q model.QueueID) error {
	rec := forgetRecord{group: group, queue: q}
	return e.writeState(ctx, group, q, rec.encode(), e.applyForget)
}

// writeState writes a record about a (group, queue) state and applies it
// with the state locked.
func (e *Engine) writeState(ctx context.Context, group string, q model.QueueID, payload []byte, apply func(*state)) error {
	defer e.slog.Shared()()
	s, err := e.state(group, q)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.write(ctx, payload, func() { apply(s) })
}

// applyForget applies a forget record; s.mu held.
func (e *Engine) applyForget(s *state) {
	s.loaded = false
	clear(s.leases)
	clear(s.done)
	s.expiryHint = 0
}

// Leases returns the handles of a group's messages handed out from a
// queue and not done (their current leases), lowest offsets first; with
// offsets given, of those messages alone. A front-end taking over a
// queue's consumers after a leader change gives back, or acknowledges by
// position, what its predecessor handed out.
func (e *Engine) Leases(group string, q model.QueueID, offsets ...model.QueueOffset) ([]Handle, error) {
	s, err := e.state(group, q)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if offsets == nil {
		offsets = slices.Sorted(maps.Keys(s.leases))
	}
	out := make([]Handle, 0, len(offsets))
	for _, off := range offsets {
		if l := s.leases[off]; l != nil {
			out = append(out, Handle{Queue: q, Offset: off, Gen: l.gen, Deadline: l.deadline})
		}
	}
	return out, nil
}

// Lookup returns the message a valid handle names, with its attempts.
func (e *Engine) Lookup(group string, h Handle) (Delivery, error) {
	attempts := e.Attempts(group, h)
	if attempts == 0 {
		return Delivery{}, ErrStaleHandle
	}
	sm, err := e.readOne(h.Queue, h.Offset)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{Queue: h.Queue, Offset: h.Offset, StoreTime: sm.StoreTime, Attempt: attempts, Handle: h, Message: sm.Message}, nil
}

// Attempts returns the attempts of a handed-out message (0 when the handle
// is not its current lease).
func (e *Engine) Attempts(group string, h Handle) int32 {
	s, l, err := e.leased(group, h)
	if err != nil {
		return 0
	}
	defer s.mu.Unlock()
	return l.attempts
}

// GroupStats counts a group's POP activity.
type GroupStats struct {
	InFlight     int   // handed out, not done (now)
	Redelivered  int64 // handed out again since start
	DeadLettered int64 // moved to the dead-letter topic since start
	Archived     int64 // share records archived at the delivery limit since start
}

// count updates a group's counters; fn runs under the engine lock.
func (e *Engine) count(group string, fn func(*GroupStats)) {
	e.mu.Lock()
	c := e.counts[group]
	if c == nil {
		c = &GroupStats{}
		e.counts[group] = c
	}
	fn(c)
	e.mu.Unlock()
}

// DeadLettered records a message of group moved to its dead-letter topic.
func (e *Engine) DeadLettered(group string) { e.count(group, func(c *GroupStats) { c.DeadLettered++ }) }

// Stats returns every group's counters.
func (e *Engine) Stats() map[string]GroupStats {
	e.mu.Lock()
	out := make(map[string]GroupStats, len(e.counts))
	for g, c := range e.counts {
		out[g] = *c
	}
	ss := make(map[key]*state, len(e.states))
	for k, s := range e.states {
		ss[k] = s
	}
	e.mu.Unlock()
	for k, s := range ss {
		s.mu.Lock()
		n := len(s.leases)
		s.mu.Unlock()
		st := out[k.group]
		st.InFlight += n
		out[k.group] = st
	}
	return out
}

// InFlight counts a group's messages handed out and not done.
func (e *Engine) InFlight(group string) int {
	e.mu.Lock()
	var ss []*state
	for k, s := range e.states {
		if k.group == group {
			ss = append(ss, s)
		}
	}
	e.mu.Unlock()
	n := 0
	for _, s := range ss {
		s.mu.Lock()
		n += len(s.leases)
		s.mu.Unlock()
	}
	return n
}
