package storage

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/keyindex"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// Record is one record to append: a payload holding Count messages of one
// queue. Append fills BaseOffset, Pos, Size, Index and StoreTime.
type Record = commitlog.Entry

// control record operations (payload byte 0; opKeeperSnapshot, opRaft,
// opTierCommit and opTierDrop are 5 to 8)
const (
	// opCreateQueue creates a queue: op, or op | next i64 (little endian)
	// for one whose offsets begin at next (a queue moved from another
	// group carries on from where it ended there).
	opCreateQueue = 1
	opDeleteQueue = 2
	// opSetStart moves a queue's start offset forward (retention,
	// DeleteRecords, trims): op | start i64 (little endian), clamped to the
	// queue's end when written, so replaying it moves the start exactly as
	// it moved.
	opSetStart = 3
	// opHole makes the record of a queue starting at an offset a hole
	// (compaction kept none of its messages): op | base i64 | count u32
	// (little endian; the count lets a rebuild that no longer has the
	// record make the hole).
	opHole = 4
	// opSealQueue closes a queue to appends (it moves to another group,
	// which carries it on): op | end i64, the offset it ended at.
	opSealQueue = 9
	// opUnsealQueue opens a sealed queue again (a move given up): op.
	opUnsealQueue = 10
)

// AppendOptions modify one Append call.
type AppendOptions struct {
	// NoWait returns as soon as the records are written, without waiting for
	// the durability policy (Kafka acks=0).
	NoWait bool
	// Deferred (implies NoWait) asks for no fsync of its own in sync mode:
	// the records become durable, and visible to readers, with the next
	// sync another append asks for or at most storage.flush_interval later.
	// For bookkeeping only its writer reads back after a restart, where an
	// operating-system crash losing the last of it only repeats work.
	Deferred bool
}

// batchAssigner assigns offsets for one Append call under the log lock.
type batchAssigner struct {
	e   *Engine
	qs  []*queue
	i   int
	one [1]*queue // qs of a one-record append (no second allocation)
}

func (a *batchAssigner) Assign(r *commitlog.Entry) {
	q := a.qs[a.i]
	a.i++
	a.e.index(q, r.Queue, r.Pos, r)
}

// Done marks the queues touched by the call for flushing and notification,
// once per call rather than once per record.
func (a *batchAssigner) Done() {
	a.e.markPending(a.qs[:a.i])
}

// index records a written (or replayed) data record in its queue and the key
// index, and marks the queue for flushing and notification.
func (e *Engine) index(q *queue, id model.QueueID, pos model.LogPos, r *commitlog.Entry) {
	base, _ := q.idx.Assign(pos, r.Segment, r.Size, r.Count, r.Timestamp, r.TagHash)
	r.BaseOffset = base
	q.epochs.note(r.Term.LeaderEpoch(), base)
	for _, k := range r.Keys {
		if err := e.keys.Add(keyindex.Hash(k.Key), id, base+model.QueueOffset(k.Delta), r.StoreTime, pos); err != nil {
			e.log.Warn("key index add failed", "queue", id, "err", err)
		}
	}
	q.lastEnd.Store(int64(pos) + int64(r.Size))
}

// markPending puts queues on the index-flush and notification lists. It runs
// before the records that touched them are published, so the visibility
// change that publishes them always finds them on the notification list.
func (e *Engine) markPending(qs []*queue) {
	e.pmu.Lock()
	var last *queue
	for _, q := range qs {
		if q == last {
			continue
		}
		last = q
		if !q.pendingFlush.Load() {
			q.pendingFlush.Store(true)
			e.flushPending = append(e.flushPending, q)
		}
		if !q.pendingNotify.Load() {
			q.pendingNotify.Store(true)
			e.notifyList = append(e.notifyList, q)
		}
	}
	e.pmu.Unlock()
}

// Append writes records, assigning each the next offsets of its queue, and
// returns once they are durable under the engine's policy.
func (e *Engine) Append(ctx context.Context, recs []*Record) error {
	return e.AppendWith(ctx, recs, AppendOptions{})
}

// AppendWith is Append with options.
func (e *Engine) AppendWith(ctx context.Context, recs []*Record, opts AppendOptions) error {
	if len(recs) == 0 {
		return nil
	}
	if e.diskFull.Load() {
		e.stats.RefusedDiskFull.Add(1)
		return model.ErrDiskFull
	}
	a := &batchAssigner{e: e}
	if len(recs) == 1 {
		a.qs = a.one[:]
	} else {
		a.qs = make([]*queue, len(recs))
	}
	var bytes int64
	var msgs int64
	for i, r := range recs {
		q, err := e.check(r)
		if err != nil {
			return err
		}
		a.qs[i] = q
		bytes += int64(len(r.Payload))
		msgs += int64(r.Count)
	}
	appendLog := e.clog.Append
	if opts.Deferred {
		appendLog = e.clog.AppendDeferred
	}
	if e.cfg.Replicated {
		_, err := e.appendReplicated(ctx, recs, func() (model.LogPos, error) {
			// Checked under the replication pause SealQueue waits on, so
			// no append passes a seal unnoticed.
			for _, q := range a.qs {
				if q.sealed.Load() {
					return 0, model.ErrQueueMoved
				}
			}
			end, err := appendLog(recs, a)
			e.countAppended(a.i, msgs, bytes)
			return end, err
		}, opts.NoWait || opts.Deferred)
		if err != nil {
			return fmt.Errorf("append: %w", err)
		}
		return nil
	}
	for _, q := range a.qs {
		if q.sealed.Load() {
			return model.ErrQueueMoved
		}
	}
	end, err := appendLog(recs, a)
	e.countAppended(a.i, msgs, bytes)
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	if opts.NoWait || opts.Deferred || e.cfg.Durability != DurabilitySync {
		return nil
	}
	return e.clog.WaitSynced(ctx, end)
}

// Check says whether Append would take r (a caller appending the records of
// several requests at once checks each first, so one refused record does
// not fail the others).
func (e *Engine) Check(r *Record) error {
	_, err := e.check(r)
	return err
}

// check returns the queue of a record Append would take.
func (e *Engine) check(r *Record) (*queue, error) {
	if r.Count == 0 {
		return nil, fmt.Errorf("%w: record with no messages", model.ErrCorruptRecord)
	}
	if r.Flags&commitlog.FlagControl != 0 {
		return nil, fmt.Errorf("%w: control flag on a data record", model.ErrCorruptRecord)
	}
	if n := len(r.Payload) + commitlog.KeysLen(r.Keys); n > e.cfg.MaxRecordSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", model.ErrMessageTooLarge, n, e.cfg.MaxRecordSize)
	}
	return e.queue(r.Queue)
}

// countAppended counts the records an append wrote (all its messages and
// bytes once any was written).
func (e *Engine) countAppended(written int, msgs, bytes int64) {
	if written > 0 {
		e.stats.AppendedRecords.Add(int64(written))
		e.stats.AppendedMessages.Add(msgs)
		e.stats.AppendedBytes.Add(bytes)
	}
}

// writeDurable appends records through the log and waits until they may be
// relied on: fsynced on a single node (whatever the durability policy:
// control records and in-place changes are rare and must not be lost),
// committed in a replication group.
func (e *Engine) writeDurable(ctx context.Context, recs []*commitlog.Entry, a commitlog.Assigner) error {
	if e.cfg.Replicated {
		_, err := e.appendReplicated(ctx, recs, func() (model.LogPos, error) { return e.clog.Append(recs, a) }, false)
		return err
	}
	end, err := e.clog.Append(recs, a)
	if err != nil {
		return err
	}
	return e.clog.SyncTo(ctx, end)
}

// WaitDurable waits until everything up to end (a record's Pos+Size) is
// durable under the engine's policy: fsynced in sync mode, at once in async;
// in a replication group, committed, and failing if leadership changed or
// the log was cut since tk (taken before the records were written; see
// replicated.go).
func (e *Engine) WaitDurable(ctx context.Context, end model.LogPos, tk WriteTicket) error {
	if e.cfg.Replicated {
		return e.waitCommittedPos(ctx, end, tk)
	}
	if e.cfg.Durability != DurabilitySync {
		return nil
	}
	return e.clog.WaitSynced(ctx, end)
}

// WrittenEnd is the end of the records written so far.
func (e *Engine) WrittenEnd() model.LogPos { return e.clog.End() }

// CreateQueue creates an empty queue. Creating an existing queue is a no-op.
func (e *Engine) CreateQueue(ctx context.Context, id model.QueueID) error {
	return e.CreateQueues(ctx, []model.QueueID{id})
}

// CreateQueues creates empty queues with one durable log write.
func (e *Engine) CreateQueues(ctx context.Context, ids []model.QueueID) error {
	var missing []model.QueueID
	for _, id := range ids {
		if _, err := e.queue(id); err != nil {
			missing = append(missing, id)
		}
	}
	return e.control(ctx, missing, opCreateQueue)
}

// CreateQueueAt creates an empty queue whose first offset is next (its
// start and end both next): a queue moved here from another group carries
// on from the offset it ended at there. Creating an existing queue is a
// no-op (its offsets stay as they are).
func (e *Engine) CreateQueueAt(ctx context.Context, id model.QueueID, next model.QueueOffset) error {
	if _, err := e.queue(id); err == nil {
		return nil
	}
	if next <= 0 {
		return e.control(ctx, []model.QueueID{id}, opCreateQueue)
	}
	return e.writeControl(ctx, []model.QueueID{id}, [][]byte{binary.LittleEndian.AppendUint64([]byte{opCreateQueue}, uint64(next))})
}

// SealQueue closes a queue to appends — it moves to another replication
// group, which carries it on — and returns its end: every append given an
// offset before has it below end; every later one fails with
// model.ErrQueueMoved. The seal is a durable control record, so the
// group's other replicas, and this one after a restart while the log
// holds the record, keep it; the topic's record of the move is what
// refuses appends for good. Sealing a sealed queue returns its end again.
func (e *Engine) SealQueue(ctx context.Context, id model.QueueID) (model.QueueOffset, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, err
	}
	q.sealed.Store(true)
	if e.cfg.Replicated {
		// Appends that saw the queue open have written once no append
		// holds the pause.
		e.repl.pause.Lock()
		e.repl.pause.Unlock() //nolint:staticcheck // an empty critical section is the barrier
	}
	end := q.idx.NextOffset()
	payload := binary.LittleEndian.AppendUint64([]byte{opSealQueue}, uint64(end))
	if err := e.writeControl(ctx, []model.QueueID{id}, [][]byte{payload}); err != nil {
		return 0, err
	}
	return end, nil
}

// UnsealQueue opens a sealed queue to appends again (a move given up
// before the queue's new group took it).
func (e *Engine) UnsealQueue(ctx context.Context, id model.QueueID) error {
	q, err := e.queue(id)
	if err != nil {
		return err
	}
	if !q.sealed.Load() {
		return nil
	}
	return e.writeControl(ctx, []model.QueueID{id}, [][]byte{{opUnsealQueue}})
}

// QueueSealed reports whether a queue is closed to appends.
func (e *Engine) QueueSealed(id model.QueueID) bool {
	q, err := e.queue(id)
	return err == nil && q.sealed.Load()
}

// DeleteQueue deletes a queue and its index; its records in the log are
// reclaimed with their segments.
func (e *Engine) DeleteQueue(ctx context.Context, id model.QueueID) error {
	if _, err := e.queue(id); err != nil {
		return err
	}
	return e.control(ctx, []model.QueueID{id}, opDeleteQueue)
}

// control writes queue control records and waits until they are durable,
// whatever the durability policy: queue creation and deletion are rare and
// must never be lost.
func (e *Engine) control(ctx context.Context, ids []model.QueueID, op byte) error {
	if len(ids) == 0 {
		return nil
	}
	payloads := make([][]byte, len(ids))
	for i := range ids {
		payloads[i] = []byte{op}
	}
	return e.writeControl(ctx, ids, payloads)
}

// writeControl writes one control record per queue and waits until they
// are durable.
func (e *Engine) writeControl(ctx context.Context, ids []model.QueueID, payloads [][]byte) error {
	recs := make([]*commitlog.Entry, len(ids))
	for i, id := range ids {
		recs[i] = &commitlog.Entry{Format: model.FormatInternal, Flags: commitlog.FlagControl, Queue: id, Count: 1, Payload: payloads[i]}
	}
	err := e.writeDurable(ctx, recs, controlAssigner{e})
	if err != nil && recs[0].Index == 0 {
		return fmt.Errorf("queue control: %w", err)
	}
	if payloads[0][0] == opDeleteQueue {
		e.noteApplied(recs)
	}
	return err
}

type controlAssigner struct{ e *Engine }

func (c controlAssigner) Assign(r *commitlog.Entry) {
	if (len(r.Payload) == 13 && r.Payload[0] == opHole) || tierOp(r.Payload) {
		return // applied once durable
	}
	if len(r.Payload) == 9 && r.Payload[0] == opSetStart {
		// Clamp under the log lock; the index moves after the append (it
		// may wait for index file work the log lock must not).
		if q, err := c.e.queue(r.Queue); err == nil {
			off := min(model.QueueOffset(binary.LittleEndian.Uint64(r.Payload[1:])), q.idx.NextOffset())
			binary.LittleEndian.PutUint64(r.Payload[1:], uint64(off))
		}
		return
	}
	c.e.applyControl(r.Queue, r.Payload, r.Pos, r.Size)
}
func (c controlAssigner) Done() {}

// applyControl creates or deletes a queue; it runs under the log lock, or
// during replay.
func (e *Engine) applyControl(id model.QueueID, payload []byte, pos model.LogPos, size uint32) {
	if len(payload) == 0 {
		return
	}
	e.qmu.Lock()
	defer e.qmu.Unlock()
	switch payload[0] {
	case opCreateQueue:
		if _, ok := e.queues[id]; !ok {
			var st queueindex.State
			if len(payload) == 9 {
				next := model.QueueOffset(binary.LittleEndian.Uint64(payload[1:]))
				st.Next, st.Start = next, next
			}
			q := &queue{idx: e.idx.Open(id, st, nil)}
			q.pins.set(payload, pos, size)
			e.queues[id] = q
		}
	case opSetStart:
		if q, ok := e.queues[id]; ok && len(payload) == 9 {
			q.pins.set(payload, pos, size)
			if err := q.idx.SetStart(model.QueueOffset(binary.LittleEndian.Uint64(payload[1:]))); err != nil {
				e.log.Warn("replay start offset", "queue", id, "err", err)
			}
		}
	case opSealQueue:
		if q, ok := e.queues[id]; ok {
			q.sealed.Store(true)
		}
	case opUnsealQueue:
		if q, ok := e.queues[id]; ok {
			q.sealed.Store(false)
		}
	case opHole:
		if q, ok := e.queues[id]; ok && len(payload) == 13 {
			if e.recount != nil {
				e.recount[q] = true
			}
			// Pinned even when the index already had the hole.
			q.pins.set(payload, pos, size)
			if _, err := q.idx.Punch(model.QueueOffset(binary.LittleEndian.Uint64(payload[1:])), queueindex.FromAny); err != nil {
				e.log.Warn("replay compaction hole", "queue", id, "err", err)
			}
		}
	case opTierCommit:
		if id == engineQueue {
			if err := e.manifest.apply(payload); err != nil {
				e.log.Warn("tier commit record unreadable", "pos", pos, "err", err)
			}
		}
	case opTierDrop:
		if id == engineQueue {
			if err := e.manifest.drop(payload); err != nil {
				e.log.Warn("tier drop record unreadable", "pos", pos, "err", err)
			}
		}
	case opDeleteQueue:
		if q, ok := e.queues[id]; ok {
			delete(e.queues, id)
			if err := q.idx.Delete(); err != nil {
				e.log.Warn("delete queue index", "queue", id, "err", err)
			}
			q.wake()
		}
	}
}

// replay re-applies one recovered record.
func (e *Engine) replay(pos model.LogPos, r *commitlog.Record) error {
	if r.Flags&commitlog.FlagControl != 0 {
		if inPlaceOp(r.Payload) {
			e.appliedFloor.Store(int64(r.Index)) // applied in place
		}
		e.applyControl(r.Queue, r.Payload, pos, r.Length)
		return nil
	}
	q := e.queues[r.Queue]
	if q == nil {
		return nil // a deleted queue
	}
	if r.Flags&commitlog.FlagCompacted != 0 {
		e.appliedFloor.Store(int64(r.Index))
		return e.replayRewrite(q, pos, r) // state keepers saw the original
	}
	if r.Flags&commitlog.FlagRelocated != 0 {
		return e.replayCopy(q, pos, r) // an older version's copy
	}
	for _, k := range e.cfg.StateKeepers {
		k.Replay(pos, r)
	}
	if next := q.idx.NextOffset(); r.BaseOffset > next {
		e.log.Error("offset gap while replaying; index continues at the record's offset",
			"queue", r.Queue, "expected", next, "found", r.BaseOffset, "pos", pos)
	}
	e.indexReplayed(q, pos, r)
	return nil
}

// indexReplayed indexes a replayed data record at pos unless its offsets
// are indexed already (before the checkpoint); a gap before it is skipped.
func (e *Engine) indexReplayed(q *queue, pos model.LogPos, r *commitlog.Record) bool {
	next := q.idx.NextOffset()
	if r.BaseOffset < next {
		return false
	}
	if r.BaseOffset > next {
		q.idx.SetNext(r.BaseOffset)
	}
	ent := &commitlog.Entry{Queue: r.Queue, Count: r.Count, Timestamp: r.Timestamp, StoreTime: r.StoreTime,
		TagHash: r.TagHash, Size: r.Length, Segment: r.Segment, Term: r.Term}
	_ = r.EachKey(func(k commitlog.Key) { ent.Keys = append(ent.Keys, k) })
	e.index(q, r.Queue, pos, ent)
	e.markPending([]*queue{q})
	return true
}
