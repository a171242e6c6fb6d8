package broker

// The check-back loop of RocketMQ transactions and the saving of their
// cursor (see halftxn.go).

import (
	"container/heap"
	"context"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// halfCursorSaveEvery spaces out cursor saves.
const halfCursorSaveEvery = time.Second

// runHalfChecks checks halves as they come due and saves the cursor.
func (b *Broker) runHalfChecks(ctx context.Context) {
	h := b.halves
	save := time.NewTicker(halfCursorSaveEvery)
	defer save.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := b.checkDueHalves(ctx)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			b.saveHalfCursor(context.Background())
			return
		case <-h.wake:
		case <-timer.C:
		case <-save.C:
			b.saveHalfCursor(ctx)
		}
	}
}

// checkDueHalves checks (or discards) every half due now; it returns how
// long until the next one is due.
func (b *Broker) checkDueHalves(ctx context.Context) time.Duration {
	h := b.halves
	for ctx.Err() == nil {
		now := b.opts.Now().UnixMilli()
		h.mu.Lock()
		if len(h.checks) == 0 {
			h.mu.Unlock()
			return time.Minute
		}
		top := h.checks[0]
		if top.at > now {
			h.mu.Unlock()
			return time.Duration(top.at-now) * time.Millisecond
		}
		heap.Pop(&h.checks)
		e := h.pending[top.offset]
		if e == nil || e.resolving || e.nextCheck != top.at {
			h.mu.Unlock() // resolved, or rescheduled since
			continue
		}
		e.resolving = true
		checkers := h.checkers
		h.mu.Unlock()
		if e.checks >= b.opts.TxnCheckMax {
			b.discardHalf(ctx, top.offset, e)
			continue
		}
		b.checkHalf(ctx, top.offset, e, checkers, now)
	}
	return time.Second
}

// checkHalf records one check of a half and offers it to the checkers.
func (b *Broker) checkHalf(ctx context.Context, offset model.QueueOffset, e *halfEntry, checkers []TxnChecker, now int64) {
	h := b.halves
	err := b.engine.Append(ctx, []*storage.Record{b.opRecord(opTxnChecked, offset, now)})
	var m model.Message
	if err == nil {
		m, err = b.halfMessage(offset)
	}
	h.mu.Lock()
	e.resolving = false
	next := now + b.opts.TxnCheckInterval.Milliseconds()
	if err != nil {
		next = now + time.Second.Milliseconds()
	} else {
		e.checks++
	}
	e.nextCheck = next
	heap.Push(&h.checks, halfCheck{at: next, offset: offset})
	h.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("transaction check not recorded, retrying", "offset", offset, "err", err)
		}
		return
	}
	h.checked.Add(1)
	m.Headers = append(withoutHeaders(m.Headers, HeaderCheckTimes),
		model.Header{Key: HeaderCheckTimes, Value: []byte(strconv.Itoa(e.checks))})
	check := TxnCheck{Group: e.group, Queue: h.half, Offset: offset, StoreTime: e.stored, Checks: e.checks - 1, Message: m}
	for _, fn := range checkers {
		if fn(check) {
			return
		}
	}
	b.log.Debug("transaction check found no live producer", "group", e.group, "offset", offset, "checks", e.checks)
}

// discardHalf moves a half checked too often to the discard topic.
func (b *Broker) discardHalf(ctx context.Context, offset model.QueueOffset, e *halfEntry) {
	h := b.halves
	_, _, _, err := b.resolveHalf(ctx, offset, opTxnDiscard)
	h.mu.Lock()
	if err != nil {
		e.resolving = false
		e.nextCheck = b.opts.Now().UnixMilli() + time.Second.Milliseconds()
		heap.Push(&h.checks, halfCheck{at: e.nextCheck, offset: offset})
	} else {
		h.forget(offset)
	}
	h.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("unresolved transactional message not discarded yet", "offset", offset, "err", err)
		}
		return
	}
	h.discarded.Add(1)
	b.log.Warn("transactional message discarded after the maximum checks", "group", e.group, "half_offset", offset,
		"checks", e.checks, "topic", DiscardTopic.Topic)
}

// saveHalfCursor saves the oldest pending half and the op position it
// needs as the start offsets of the two queues (log records: every replica
// and every replay recovers from the same place), dropping what lies before
// them.
func (b *Broker) saveHalfCursor(ctx context.Context) {
	h := b.halves
	h.mu.Lock()
	low := h.low
	var opFrom model.QueueOffset
	if e := h.pending[low]; e != nil {
		opFrom = e.opEnd
	} else {
		_, _, opFrom, _ = b.engine.Offsets(h.op)
	}
	h.mu.Unlock()
	cur := strconv.FormatInt(int64(low), 10) + ":" + strconv.FormatInt(int64(opFrom), 10)
	if cur == h.saved {
		return
	}
	if err := b.engine.SetStartOffsets(ctx, map[model.QueueID]model.QueueOffset{h.half: low, h.op: opFrom}); err != nil {
		if ctx.Err() == nil {
			b.log.Warn("transaction cursor not saved", "err", err)
		}
		return
	}
	h.saved = cur
}
