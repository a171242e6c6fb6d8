package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/keyindex"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// StoredRecord is one record as read back: its header, its keys block and its
// payload exactly as stored. The slices alias the mapped log and are valid
// until the ReadResult is released.
type StoredRecord = commitlog.Record

// ReadResult holds the records of one read and the references that keep their
// bytes mapped. Call Release when the bytes have been sent.
type ReadResult struct {
	Records       []StoredRecord
	NextOffset    model.QueueOffset // offset after the last returned message
	HighWatermark model.QueueOffset // end of the visible data
	StartOffset   model.QueueOffset // first readable offset
	Bytes         int
	views         []commitlog.View
}

// Release drops the result's references to the log.
func (r *ReadResult) Release() {
	for _, v := range r.views {
		v.Release()
	}
	r.views = nil
	r.Records = nil
}

// ReadOptions bound one read. At least one record is returned when one is
// available, even if it is larger than MaxBytes, so a consumer never stalls.
type ReadOptions struct {
	MaxBytes   int
	MaxRecords int
	// SkipTag, when set, is asked about each one-message record that has a
	// tag hash; records it refuses are skipped from the index alone, their
	// log bytes never read (broker-side tag filtering).
	SkipTag func(tagHash uint64) bool
}

// maxSkipped bounds how many records one read skips by tag, so a filter that
// matches nothing cannot make one read walk a whole queue.
const maxSkipped = 1 << 16

// maxHoles bounds the compaction holes one read steps over.
const maxHoles = 1 << 22

// Offsets returns a queue's first readable offset, its high watermark (end
// of the visible data) and its log end offset (including records not yet
// durable in sync mode).
func (e *Engine) Offsets(id model.QueueID) (start, hw, end model.QueueOffset, err error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, 0, 0, err
	}
	start = q.idx.StartOffset()
	end = q.idx.NextOffset()
	hw = q.idx.VisibleEnd(e.visible())
	return start, hw, end, nil
}

// Read returns stored records of queue id from offset. The first record may
// begin before offset when it holds several messages (a Kafka batch). Reading
// at the high watermark returns no records; reading outside [start, hw] is
// model.ErrOffsetOutOfRange.
func (e *Engine) Read(id model.QueueID, offset model.QueueOffset, opts ReadOptions) (*ReadResult, error) {
	q, err := e.queue(id)
	if err != nil {
		return nil, err
	}
	visible := e.visible()
	res := &ReadResult{StartOffset: q.idx.StartOffset(), HighWatermark: q.idx.VisibleEnd(visible), NextOffset: offset}
	if offset < res.StartOffset || offset > res.HighWatermark {
		return res, fmt.Errorf("%w: offset %d not in [%d, %d]", model.ErrOffsetOutOfRange, offset, res.StartOffset, res.HighWatermark)
	}
	if offset == res.HighWatermark {
		return res, nil
	}
	maxRecords := opts.MaxRecords
	if maxRecords <= 0 {
		maxRecords = 1 << 20
	}
	no, first, err := q.idx.Lookup(offset)
	if err != nil {
		return res, err
	}
	entries := []queueindex.Entry{first}
	var cur commitlog.View
	skipped, holes := 0, 0
	for len(res.Records) < maxRecords && skipped < maxSkipped {
		if len(entries) == 0 {
			entries, err = q.idx.Entries(no, min(64, maxRecords-len(res.Records)), entries[:0])
			if err != nil || len(entries) == 0 {
				break
			}
		}
		ent := entries[0]
		if ent.Hole() {
			// Compaction removed every message of this record: step over
			// it (cheaply: only the index is read).
			res.NextOffset = ent.End()
			entries = entries[1:]
			no++
			if holes++; holes >= maxHoles {
				break
			}
			continue
		}
		if !ent.VisibleAt(visible) {
			break
		}
		if opts.SkipTag != nil && ent.Count == 1 && ent.TagHash != 0 && ent.BaseOffset >= offset && opts.SkipTag(ent.TagHash) {
			res.NextOffset = ent.End()
			entries = entries[1:]
			no++
			skipped++
			continue
		}
		if len(res.Records) > 0 && opts.MaxBytes > 0 && res.Bytes+int(ent.Size) > opts.MaxBytes {
			break
		}
		rec, v, err := e.readEntry(id, ent, cur)
		if err != nil && errors.Is(err, model.ErrOffsetOutOfRange) {
			// The segment went away under us: garbage collection moved
			// the record (its entry points at the copy now).
			if again, rerr := q.idx.Entries(no, 1, nil); rerr == nil && len(again) == 1 && again[0].Pos != ent.Pos {
				rec, v, err = e.readEntry(id, again[0], cur)
			}
		}
		if err != nil {
			res.Release()
			return res, err
		}
		if v != cur {
			res.views = append(res.views, v)
			cur = v
		}
		res.Records = append(res.Records, rec)
		res.Bytes += int(ent.Size)
		res.NextOffset = ent.End()
		entries = entries[1:]
		no++
	}
	e.stats.ReadRecords.Add(int64(len(res.Records)))
	e.stats.ReadBytes.Add(int64(res.Bytes))
	return res, nil
}

// readEntry decodes the record an index entry points at, reusing cur when it
// covers the position, and checks that it is the record the index promised.
func (e *Engine) readEntry(id model.QueueID, ent queueindex.Entry, cur commitlog.View) (StoredRecord, commitlog.View, error) {
	v := cur
	b, ok := []byte(nil), false
	if v != (commitlog.View{}) {
		b, ok = v.Bytes(ent.Pos, int(ent.Size))
	}
	var rec StoredRecord
	var err error
	if !ok {
		if v, err = e.logAt(ent.Pos).Acquire(ent.Pos); err != nil {
			if !errors.Is(err, model.ErrOffsetOutOfRange) || ent.Pos.IsLocal() {
				return StoredRecord{}, cur, err
			}
			// Deleted locally: in the bucket, if the segment is tiered.
			var tiered bool
			if rec, tiered, err = e.readTiered(ent); !tiered {
				return StoredRecord{}, cur, fmt.Errorf("%w: record at %d: segment deleted", model.ErrOffsetOutOfRange, ent.Pos)
			}
			v = cur
		} else if b, ok = v.Bytes(ent.Pos, int(ent.Size)); !ok {
			v.Release()
			return StoredRecord{}, cur, fmt.Errorf("%w: index points past segment data at %d", model.ErrCorruptRecord, ent.Pos)
		}
	}
	switch {
	case b == nil:
		// read from the bucket (and verified) above
	case e.cfg.VerifyReads:
		rec, err = commitlog.Decode(b)
	default:
		rec.Header, err = commitlog.DecodeHeader(b)
		if err == nil {
			rec.Keys = b[commitlog.HeaderSize : commitlog.HeaderSize+rec.KeysLen]
			rec.Payload = b[commitlog.HeaderSize+rec.KeysLen : rec.Length]
		}
	}
	rec.Pos = ent.Pos
	if err == nil && (rec.Queue != id || rec.BaseOffset != ent.BaseOffset || rec.Length != ent.Size || rec.Count != ent.Count) {
		err = fmt.Errorf("%w: record at %d is queue %d offset %d, index expected queue %d offset %d",
			model.ErrCorruptRecord, ent.Pos, rec.Queue, rec.BaseOffset, id, ent.BaseOffset)
	}
	if err != nil {
		if v != cur {
			v.Release()
		}
		if errors.Is(err, model.ErrTierUnavailable) {
			e.log.Warn("cold read failed", "queue", id, "pos", ent.Pos, "err", err)
		} else {
			e.log.Error("refusing to serve a bad record", "queue", id, "pos", ent.Pos, "err", err)
		}
		return StoredRecord{}, cur, err
	}
	return rec, v, nil
}

// OffsetForTime returns the first offset whose message timestamp is >= ts, or
// the high watermark when there is none.
func (e *Engine) OffsetForTime(id model.QueueID, ts int64) (model.QueueOffset, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, err
	}
	_, ent, err := q.idx.LookupTime(ts)
	if errors.Is(err, model.ErrOffsetOutOfRange) {
		return q.idx.VisibleEnd(e.visible()), nil
	}
	if err != nil {
		return 0, err
	}
	return max(ent.BaseOffset, q.idx.StartOffset()), nil
}

// OffsetOfMaxTimestamp returns the first offset whose record carries the
// queue's largest timestamp, and that timestamp; (-1, -1) when empty.
func (e *Engine) OffsetOfMaxTimestamp(id model.QueueID) (model.QueueOffset, int64, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, 0, err
	}
	maxTS := q.idx.MaxTime()
	_, ent, err := q.idx.LookupTime(maxTS)
	if errors.Is(err, model.ErrOffsetOutOfRange) {
		return -1, -1, nil
	}
	if err != nil {
		return 0, 0, err
	}
	return max(ent.BaseOffset, q.idx.StartOffset()), maxTS, nil
}

// LookupKey returns candidate locations of messages stored with key, newest
// first, with store times in [from, to] (to <= 0: no bound). Callers read the
// candidates and compare keys.
func (e *Engine) LookupKey(key []byte, max int, from, to int64) []keyindex.Hit {
	return e.keys.Lookup(keyindex.Hash(key), max, from, to)
}

// SetStartOffset moves a queue's first readable offset forward (retention,
// Kafka DeleteRecords, trims of internal queues). The move is a control
// record in the log, durable before this returns, so every replica and
// every replay moves the start the same way; moving it backwards is a
// no-op.
func (e *Engine) SetStartOffset(id model.QueueID, offset model.QueueOffset) error {
	return e.SetStartOffsets(context.Background(), map[model.QueueID]model.QueueOffset{id: offset})
}

// SetStartOffsets moves several queues' starts with one log write and one
// fsync.
func (e *Engine) SetStartOffsets(ctx context.Context, starts map[model.QueueID]model.QueueOffset) error {
	var recs []*commitlog.Entry
	for id, off := range starts {
		q, err := e.queue(id)
		if err != nil {
			if len(starts) == 1 {
				return err
			}
			continue
		}
		if off <= q.idx.StartOffset() {
			continue
		}
		p := make([]byte, 9)
		p[0] = opSetStart
		binary.LittleEndian.PutUint64(p[1:], uint64(off))
		recs = append(recs, &commitlog.Entry{Format: model.FormatInternal, Flags: commitlog.FlagControl, Queue: id, Count: 1, Payload: p})
	}
	if len(recs) == 0 {
		return nil
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Queue < recs[j].Queue })
	// Like GC copies: a checkpoint comes either before the records
	// (recovery replays them) or after the starts moved.
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	// Durable (committed) before any segment is reclaimed on the strength
	// of it.
	if err := e.writeDurable(ctx, recs, controlAssigner{e}); err != nil {
		return fmt.Errorf("set start offsets: %w", err)
	}
	e.noteApplied(recs)
	var errs []error
	for _, r := range recs {
		if q, err := e.queue(r.Queue); err == nil {
			q.pins.set(r.Payload, r.Pos, r.Size)
			errs = append(errs, q.idx.SetStart(model.QueueOffset(binary.LittleEndian.Uint64(r.Payload[1:]))))
		}
	}
	return errors.Join(errs...)
}

// VisibleBytes returns how many stored bytes of queue id are visible from
// offset on, counting whole records and stopping once limit is reached, and
// the queue's high watermark. It reads index entries only, not the log.
func (e *Engine) VisibleBytes(id model.QueueID, offset model.QueueOffset, limit int) (int, model.QueueOffset, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, 0, err
	}
	visible := e.visible()
	hw := q.idx.VisibleEnd(visible)
	if offset >= hw || limit <= 0 {
		return 0, hw, nil
	}
	no, _, err := q.idx.Lookup(max(offset, q.idx.StartOffset()))
	if err != nil {
		return 0, hw, err
	}
	total := 0
	var buf []queueindex.Entry
	for total < limit {
		if buf, err = q.idx.Entries(no, 64, buf[:0]); err != nil || len(buf) == 0 {
			return total, hw, err
		}
		for _, ent := range buf {
			if !ent.VisibleAt(visible) || total >= limit {
				return total, hw, nil
			}
			total += int(ent.Size)
			no++
		}
	}
	return total, hw, nil
}

// Wait blocks until any of the watched queues has visible data at or past its
// offset, the context ends, or the engine closes. It never polls: appends wake
// it once their records are visible.
func (e *Engine) Wait(ctx context.Context, watches map[model.QueueID]model.QueueOffset) error {
	ch := make(chan struct{}, 1)
	qs := make([]*queue, 0, len(watches))
	defer func() {
		for _, q := range qs {
			q.removeWaiter(ch)
		}
	}()
	for id := range watches {
		q, err := e.queue(id)
		if err != nil {
			return err
		}
		q.addWaiter(ch)
		qs = append(qs, q)
	}
	for {
		visible := e.visible()
		for id, off := range watches {
			q, err := e.queue(id)
			if err != nil {
				return err
			}
			if q.idx.VisibleEnd(visible) > off {
				return nil
			}
		}
		if e.closed.Load() {
			return model.ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (q *queue) addWaiter(ch chan struct{}) {
	q.wmu.Lock()
	q.waiters = append(q.waiters, ch)
	q.wmu.Unlock()
}

func (q *queue) removeWaiter(ch chan struct{}) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	for i, w := range q.waiters {
		if w == ch {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return
		}
	}
}

// wake signals every waiter of the queue.
func (q *queue) wake() {
	q.wmu.Lock()
	for _, w := range q.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	q.wmu.Unlock()
}

// onVisible wakes the waiters of queues whose newest record is now visible.
func (e *Engine) onVisible(end model.LogPos) {
	e.pmu.Lock()
	keep := e.notifyList[:0]
	var ready []*queue
	for _, q := range e.notifyList {
		if q.lastEnd.Load() <= int64(end) {
			q.pendingNotify.Store(false)
			ready = append(ready, q)
		} else {
			keep = append(keep, q)
		}
	}
	clear(e.notifyList[len(keep):])
	e.notifyList = keep
	e.pmu.Unlock()
	for _, q := range ready {
		q.wake()
	}
}

// Wake wakes the waiters of a queue (for a change in what they may read that
// is not an append, such as a transaction ending).
func (e *Engine) Wake(id model.QueueID) {
	if q, err := e.queue(id); err == nil {
		q.wake()
	}
}

// wakeAll wakes every waiter (shutdown).
func (e *Engine) wakeAll() {
	e.qmu.RLock()
	defer e.qmu.RUnlock()
	for _, q := range e.queues {
		q.wake()
	}
}

// IndexEntry is what a queue's index knows of one stored record.
type IndexEntry struct {
	BaseOffset model.QueueOffset
	Count      uint32
	MaxTime    int64  // the largest timestamp up to this record (monotonic)
	TagHash    uint64 // the record's tag hash, as appended
	Hole       bool   // compaction kept none of its messages
}

// ScanIndex calls fn for each visible record of queue id from offset on, in
// offset order, from the index alone (no log reads), until fn returns false.
func (e *Engine) ScanIndex(id model.QueueID, from model.QueueOffset, fn func(IndexEntry) bool) error {
	q, err := e.queue(id)
	if err != nil {
		return err
	}
	visible := e.visible()
	hw := q.idx.VisibleEnd(visible)
	from = max(from, q.idx.StartOffset())
	if from >= hw {
		return nil
	}
	no, _, err := q.idx.Lookup(from)
	if err != nil {
		return err
	}
	var buf []queueindex.Entry
	for {
		if buf, err = q.idx.Entries(no, 256, buf[:0]); err != nil || len(buf) == 0 {
			return err
		}
		for _, ent := range buf {
			if ent.BaseOffset >= hw {
				return nil
			}
			if !fn(IndexEntry{BaseOffset: ent.BaseOffset, Count: ent.Count, MaxTime: ent.MaxTime, TagHash: ent.TagHash, Hole: ent.Hole()}) {
				return nil
			}
		}
		no += int64(len(buf))
	}
}
