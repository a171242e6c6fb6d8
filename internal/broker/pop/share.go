package pop

// Share consumption (Kafka share groups, KIP-932) on the same state as POP:
// records are acquired by a holder (a share group member) for a lock
// duration, in runs of offsets rather than one handle per message, and
// settled by offset: accepted, released (available again at once, its
// delivery count kept), rejected (never delivered again) or renewed (the
// lock extended). A record whose delivery count reached the group's limit
// is archived when its lock ends instead of being delivered again. Every
// change is one record in system/internal/pop, as for POP, so acquisitions
// survive a crash or a leader change until their locks end, and an accepted
// record is never delivered again.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// AckType is what a share consumer says of an acquired record.
type AckType int8

// Acknowledgement types (Kafka's numbering).
const (
	AckGap     AckType = 0 // no record at the offset (a transaction marker, a compacted record): done
	AckAccept  AckType = 1
	AckRelease AckType = 2
	AckReject  AckType = 3
	AckRenew   AckType = 4
)

// Errors of share consumption.
var (
	// ErrInvalidRecordState: an acknowledged offset is not held by the
	// member (never acquired, lock ended, settled, or another member's).
	ErrInvalidRecordState = errors.New("record not acquired by this member")
	// ErrInvalidAck: an acknowledgement batch that does not parse (bad
	// range, types or type count).
	ErrInvalidAck = errors.New("invalid acknowledgement batch")
)

// Span is the offsets First..Last, both included.
type Span struct{ First, Last model.QueueOffset }

// Acquired is a run of offsets acquired with one delivery count.
type Acquired struct {
	First, Last   model.QueueOffset
	DeliveryCount int32
}

// AckBatch settles the offsets First..Last: with one type, all of them;
// otherwise one type per offset.
type AckBatch struct {
	First, Last model.QueueOffset
	Types       []AckType
}

// ScanFunc reads a queue from offset from, about max records, and returns
// the offsets of [from, next) to deliver, ascending; the others (transaction
// markers, aborted records) are skipped. next == from: nothing to read now.
type ScanFunc func(from model.QueueOffset, max int) (deliver []Span, next model.QueueOffset, err error)

// Acquisition asks for records of a queue for one share group member.
type Acquisition struct {
	Group  string
	Queue  model.QueueID
	Holder uint64 // the member (non-zero)
	// Max is the records wanted, never exceeded.
	Max           int
	Lock          time.Duration
	DeliveryLimit int32 // a record delivered this often is archived when its lock ends
	MaxInFlight   int   // acquired records per queue and group at most (0: no limit)
	// Start is where a group new to the queue starts when it has no
	// committed offset (its auto.offset.reset).
	Start func() (model.QueueOffset, error)
	Scan  ScanFunc
}

// acquireRecord is one acquisition: leases for runs of offsets held by
// holder until deadline, gens from gen0 up in run order; done spans are
// offsets skipped or archived.
type acquireRecord struct {
	group    string
	queue    model.QueueID
	base     model.QueueOffset
	next     model.QueueOffset
	holder   uint64
	deadline int64
	gen0     uint32
	runs     []Acquired
	done     []Span
	archived int32
}

// settleRecord settles runs of offsets held by holder (renewals to
// deadline).
type settleRecord struct {
	group    string
	queue    model.QueueID
	holder   uint64
	deadline int64
	runs     []settleRun
}

type settleRun struct {
	first, last model.QueueOffset
	typ         AckType
}

// Acquire acquires records for a member: first those whose lock ended or
// that were released (lowest offsets first; those at the delivery limit
// are archived instead), then new ones from Scan, at most Max (and the
// in-flight limit). It returns the runs acquired, ascending.
func (e *Engine) Acquire(ctx context.Context, a Acquisition) ([]Acquired, error) {
	defer e.slog.Shared()()
	s, err := e.stateStarting(a.Group, a.Queue, a.Start)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := e.now()
	rec := acquireRecord{group: a.Group, queue: a.Queue, base: s.base, next: s.next, holder: a.Holder,
		deadline: now + a.Lock.Milliseconds(), gen0: s.gen + 1}
	var again []model.QueueOffset
	if now >= s.expiryHint {
		hint := int64(math.MaxInt64)
		for off, l := range s.leases {
			if l.deadline <= now {
				again = append(again, off)
			} else {
				hint = min(hint, l.deadline)
			}
		}
		s.expiryHint = hint
		slices.Sort(again)
	}
	picked := 0
	for _, off := range again {
		l := s.leases[off]
		if a.DeliveryLimit > 0 && l.attempts >= a.DeliveryLimit {
			rec.done = appendSpan(rec.done, off)
			rec.archived++
			continue
		}
		if picked >= a.Max {
			s.expiryHint = 0 // still available: the next acquisition looks again
			continue
		}
		rec.runs = appendRun(rec.runs, off, l.attempts+1)
		picked++
	}
	budget := a.Max - picked
	if a.MaxInFlight > 0 {
		budget = min(budget, a.MaxInFlight-(len(s.leases)-int(rec.archived)))
	}
	if budget > 0 && a.Scan != nil {
		deliver, next, err := a.Scan(s.next, budget)
		if err != nil && len(rec.runs) == 0 && rec.archived == 0 {
			return nil, err
		}
		if err == nil {
			n, from := 0, s.next
			for _, sp := range deliver {
				if sp.First < from || sp.Last < sp.First || sp.Last >= next {
					return nil, fmt.Errorf("scan of queue %d returned %d-%d outside %d-%d", a.Queue, sp.First, sp.Last, from, next)
				}
				// A run crossing Max is cut there: a stored batch of many
				// thousand records is shared by the group's members (the
				// client keeps only the acquired records of the batches
				// it gets).
				if n+int(sp.Last-sp.First+1) > budget {
					sp.Last = sp.First + model.QueueOffset(budget-n) - 1
					next = sp.Last + 1
				}
				// Offsets skipped between runs need no record: below
				// next and never leased, they count as done.
				if k := len(rec.runs); k > 0 && rec.runs[k-1].Last+1 == sp.First && rec.runs[k-1].DeliveryCount == 1 {
					rec.runs[k-1].Last = sp.Last
				} else {
					rec.runs = append(rec.runs, Acquired{First: sp.First, Last: sp.Last, DeliveryCount: 1})
				}
				n += int(sp.Last - sp.First + 1)
				from = sp.Last + 1
				if n >= budget {
					next = min(next, from) // what is not acquired stays new
					break
				}
			}
			rec.next = next
		}
	}
	if len(rec.runs) == 0 && len(rec.done) == 0 && rec.next == s.next {
		return nil, nil
	}
	if err := e.write(ctx, rec.encode(), func() { e.applyAcquire(s, &rec) }); err != nil {
		return nil, err
	}
	if rec.archived > 0 {
		e.count(a.Group, func(c *GroupStats) { c.Archived += int64(rec.archived) })
	}
	if again := picked; again > 0 {
		e.count(a.Group, func(c *GroupStats) { c.Redelivered += int64(again) })
	}
	out := slices.Clone(rec.runs)
	slices.SortFunc(out, func(x, y Acquired) int { return int(x.First - y.First) })
	return out, nil
}

// appendRun adds one offset to runs, extending the last run when it
// continues it with the same count.
func appendRun(runs []Acquired, off model.QueueOffset, count int32) []Acquired {
	if n := len(runs); n > 0 && runs[n-1].Last+1 == off && runs[n-1].DeliveryCount == count {
		runs[n-1].Last = off
		return runs
	}
	return append(runs, Acquired{First: off, Last: off, DeliveryCount: count})
}

// appendSpan adds one offset to spans, extending the last when adjacent.
func appendSpan(spans []Span, off model.QueueOffset) []Span {
	if n := len(spans); n > 0 && spans[n-1].Last+1 == off {
		spans[n-1].Last = off
		return spans
	}
	return append(spans, Span{off, off})
}

// applyAcquire applies an acquisition; s.mu held.
func (e *Engine) applyAcquire(s *state, r *acquireRecord) {
	gen := r.gen0
	for _, run := range r.runs {
		for off := run.First; off <= run.Last; off++ {
			if off >= s.base && !s.done[off] {
				s.leases[off] = &lease{deadline: r.deadline, attempts: run.DeliveryCount, gen: gen, holder: r.holder}
				s.gen = max(s.gen, gen)
			}
			gen++
		}
	}
	for _, sp := range r.done {
		for off := sp.First; off <= sp.Last; off++ {
			delete(s.leases, off)
			if off >= s.base {
				s.done[off] = true
			}
		}
	}
	s.next = max(s.next, r.next)
	s.expiryHint = min(s.expiryHint, r.deadline)
	e.advance(s)
}

// Settle applies a member's acknowledgements of a queue's records, all or
// none: every offset must be held by holder with its lock not ended
// (ErrInvalidRecordState otherwise). Renewals extend locks by lock.
func (e *Engine) Settle(ctx context.Context, group string, q model.QueueID, holder uint64, lock time.Duration, batches []AckBatch) error {
	if len(batches) == 0 {
		return nil
	}
	defer e.slog.Shared()()
	s, err := e.state(group, q)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := e.now()
	rec := settleRecord{group: group, queue: q, holder: holder, deadline: now + lock.Milliseconds()}
	prev := model.QueueOffset(-1)
	for _, b := range batches {
		if b.First < 0 || b.Last < b.First || b.First <= prev || len(b.Types) == 0 ||
			len(b.Types) != 1 && int64(len(b.Types)) != int64(b.Last-b.First)+1 {
			return fmt.Errorf("%w: %d-%d with %d types", ErrInvalidAck, b.First, b.Last, len(b.Types))
		}
		prev = b.Last
		for off := b.First; off <= b.Last; off++ {
			t := b.Types[0]
			if len(b.Types) > 1 {
				t = b.Types[off-b.First]
			}
			if t < AckGap || t > AckRenew {
				return fmt.Errorf("%w: type %d", ErrInvalidAck, t)
			}
			l := s.leases[off]
			if l == nil || l.holder != holder || l.deadline <= now {
				return fmt.Errorf("%w: offset %d", ErrInvalidRecordState, off)
			}
			if n := len(rec.runs); n > 0 && rec.runs[n-1].last+1 == off && rec.runs[n-1].typ == t {
				rec.runs[n-1].last = off
			} else {
				rec.runs = append(rec.runs, settleRun{first: off, last: off, typ: t})
			}
		}
	}
	return e.write(ctx, rec.encode(), func() { e.applySettle(s, &rec) })
}

// ReleaseHolder releases every record holder holds of a queue (its share
// session ended): they are available to the group's members at once.
func (e *Engine) ReleaseHolder(ctx context.Context, group string, q model.QueueID, holder uint64) (int, error) {
	defer e.slog.Shared()()
	s, err := e.state(group, q)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var held []model.QueueOffset
	for off, l := range s.leases {
		if l.holder == holder {
			held = append(held, off)
		}
	}
	if len(held) == 0 {
		return 0, nil
	}
	slices.Sort(held)
	rec := settleRecord{group: group, queue: q, holder: holder}
	for _, off := range held {
		if n := len(rec.runs); n > 0 && rec.runs[n-1].last+1 == off {
			rec.runs[n-1].last = off
		} else {
			rec.runs = append(rec.runs, settleRun{first: off, last: off, typ: AckRelease})
		}
	}
	return len(held), e.write(ctx, rec.encode(), func() { e.applySettle(s, &rec) })
}

// applySettle applies a settlement; s.mu held.
func (e *Engine) applySettle(s *state, r *settleRecord) {
	for _, run := range r.runs {
		for off := run.first; off <= run.last; off++ {
			l := s.leases[off]
			if l == nil || l.holder != r.holder {
				continue
			}
			switch run.typ {
			case AckRelease:
				l.deadline, l.holder = 0, 0
				s.expiryHint = 0
			case AckRenew:
				l.deadline = r.deadline
			default: // gap, accept, reject
				delete(s.leases, off)
				if off >= s.base {
					s.done[off] = true
				}
			}
		}
	}
	e.advance(s)
}

// stateStarting is state for a share group: one new to the queue starts at
// its committed offset, else where start says.
func (e *Engine) stateStarting(group string, q model.QueueID, start func() (model.QueueOffset, error)) (*state, error) {
	if start == nil {
		return e.state(group, q)
	}
	e.mu.Lock()
	s := e.states[key{group, q}]
	e.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		loaded := s.loaded
		s.mu.Unlock()
		if loaded {
			return s, nil
		}
	}
	ref, err := e.b.QueueByID(q)
	if err != nil {
		return nil, err
	}
	if got, err := e.b.FetchOffsets(group, ref.Topic.Name); err == nil {
		if c, ok := got[ref.Index]; ok {
			return e.stateFrom(group, q, c.Offset)
		}
	}
	off, err := start()
	if err != nil {
		return nil, err
	}
	return e.stateFrom(group, q, off)
}

func (r *acquireRecord) encode() []byte {
	b := appendHead(nil, recAcquire, r.group, r.queue)
	b = le.AppendUint64(b, uint64(r.base))
	b = le.AppendUint64(b, uint64(r.next))
	b = le.AppendUint64(b, r.holder)
	b = le.AppendUint64(b, uint64(r.deadline))
	b = le.AppendUint32(b, r.gen0)
	b = le.AppendUint32(b, uint32(r.archived))
	b = le.AppendUint32(b, uint32(len(r.runs)))
	for _, run := range r.runs {
		b = le.AppendUint64(b, uint64(run.First))
		b = le.AppendUint64(b, uint64(run.Last))
		b = le.AppendUint32(b, uint32(run.DeliveryCount))
	}
	b = le.AppendUint32(b, uint32(len(r.done)))
	for _, sp := range r.done {
		b = le.AppendUint64(b, uint64(sp.First))
		b = le.AppendUint64(b, uint64(sp.Last))
	}
	return b
}

func (r *settleRecord) encode() []byte {
	b := appendHead(nil, recSettle, r.group, r.queue)
	b = le.AppendUint64(b, r.holder)
	b = le.AppendUint64(b, uint64(r.deadline))
	b = le.AppendUint32(b, uint32(len(r.runs)))
	for _, run := range r.runs {
		b = le.AppendUint64(b, uint64(run.first))
		b = le.AppendUint64(b, uint64(run.last))
		b = append(b, byte(run.typ))
	}
	return b
}

// maxRun bounds a decoded run's length: a corrupt record must not make a
// replay loop over the whole offset space.
const maxRun = 1 << 24

func decodeAcquire(r *reader, group string, q model.QueueID) *acquireRecord {
	rec := &acquireRecord{group: group, queue: q, base: model.QueueOffset(r.u64()), next: model.QueueOffset(r.u64()),
		holder: r.u64(), deadline: int64(r.u64()), gen0: r.u32(), archived: int32(r.u32())}
	n := r.count(20)
	for i := 0; i < n && r.err == nil; i++ {
		run := Acquired{First: model.QueueOffset(r.u64()), Last: model.QueueOffset(r.u64()), DeliveryCount: int32(r.u32())}
		if !validSpan(run.First, run.Last) {
			r.err = fmt.Errorf("%w: acquired run %d-%d", model.ErrCorruptRecord, run.First, run.Last)
		}
		rec.runs = append(rec.runs, run)
	}
	n = r.count(16)
	for i := 0; i < n && r.err == nil; i++ {
		sp := Span{model.QueueOffset(r.u64()), model.QueueOffset(r.u64())}
		if !validSpan(sp.First, sp.Last) {
			r.err = fmt.Errorf("%w: done span %d-%d", model.ErrCorruptRecord, sp.First, sp.Last)
		}
		rec.done = append(rec.done, sp)
	}
	return rec
}

func decodeSettle(r *reader, group string, q model.QueueID) *settleRecord {
	rec := &settleRecord{group: group, queue: q, holder: r.u64(), deadline: int64(r.u64())}
	n := r.count(17)
	for i := 0; i < n && r.err == nil; i++ {
		run := settleRun{first: model.QueueOffset(r.u64()), last: model.QueueOffset(r.u64()), typ: AckType(r.take(1)[0])}
		if !validSpan(run.first, run.last) || run.typ > AckRenew {
			r.err = fmt.Errorf("%w: settled run %d-%d type %d", model.ErrCorruptRecord, run.first, run.last, run.typ)
		}
		rec.runs = append(rec.runs, run)
	}
	return rec
}

func validSpan(first, last model.QueueOffset) bool {
	return first >= 0 && last >= first && last-first < maxRun
}

// Place is a group's share-partition start offset in a queue (every record
// below is done) and how many records above it are done; ok is false when
// the group has no state there.
func (e *Engine) Place(group string, q model.QueueID) (start model.QueueOffset, done int, ok bool) {
	e.mu.Lock()
	s := e.states[key{group, q}]
	e.mu.Unlock()
	if s == nil {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		return 0, 0, false
	}
	return s.base, len(s.done), true
}

// GroupQueues lists the queues where a group has state.
func (e *Engine) GroupQueues(group string) []model.QueueID {
	e.mu.Lock()
	var qs []model.QueueID
	var ss []*state
	for k, s := range e.states {
		if k.group == group {
			qs, ss = append(qs, k.queue), append(ss, s)
		}
	}
	e.mu.Unlock()
	var out []model.QueueID
	for i, s := range ss {
		s.mu.Lock()
		if s.loaded {
			out = append(out, qs[i])
		}
		s.mu.Unlock()
	}
	slices.Sort(out)
	return out
}
