package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/keyindex"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// Garbage collection by relocation (BookKeeper's entry-log compaction): a
// sealed segment whose live fraction is below a threshold has its live
// records copied to the local area (local.go: same queue, offsets,
// timestamps, keys and payload, outside the replicated log) and their
// index entries repointed; the segment then has no live bytes and the
// next reclamation deletes it, after a checkpoint. Queue offsets and
// record indexes never change, only positions, so garbage collection is a
// decision each node takes alone.
//
// Crash safety: copies are synced before any entry points at them, and an
// entry moves only if it still points at the original; recovery replaying
// a copy moves the entry too (if it is still at the copy's origin), so a
// crash at any point leaves every entry on a readable record. The original
// is deleted only after a checkpoint that covers the moves, so recovery
// never needs it. Readers holding a view of the old segment keep its
// mapping.

// GCResult says what one garbage-collection pass did.
type GCResult struct {
	Examined   int   // sealed segments looked at
	Relocated  int   // segments whose live records were moved
	Records    int   // records copied
	Copied     int64 // bytes copied
	Deleted    int   // segments deleted afterwards
	FreedBytes int64
	Took       time.Duration
}

// relocateBatchBytes bounds one append of copies.
const relocateBatchBytes = 64 << 10

// GC relocates the live records of every sealed segment whose live
// fraction is below threshold (0..1), least live first, then deletes the
// segments nothing retains. Passes are serialised.
func (e *Engine) GC(ctx context.Context, threshold float64) (GCResult, error) {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	start := time.Now()
	var res GCResult
	var cands []SegmentUsage
	synced, localSynced := e.clog.Synced(), e.local.Synced()
	for _, u := range e.Usage() {
		size := int64(u.End - u.Base)
		if !u.Sealed || size == 0 || (!u.Base.IsLocal() && u.End > synced) || (u.Base.IsLocal() && u.End > localSynced) {
			continue
		}
		if e.tier != nil && !u.Base.IsLocal() {
			continue // goes to the bucket and leaves local disk whole (tiering.go)
		}
		res.Examined++
		if u.Live > 0 && float64(u.Live) <= threshold*float64(size) {
			cands = append(cands, u)
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		return float64(cands[i].Live)/float64(cands[i].End-cands[i].Base) < float64(cands[j].Live)/float64(cands[j].End-cands[j].Base)
	})
	var errs []error
	rate := e.cfg.GCBytesPerSecond
	if e.diskFull.Load() {
		rate = 0 // writes are refused anyway: recover as fast as possible
	}
	th := newThrottle(rate)
	th.foreground = e.stats.AppendedBytes.Load
	for _, u := range cands {
		if ctx.Err() != nil {
			break
		}
		n, bytes, err := e.relocate(ctx, u, th, nil)
		res.Records += n
		res.Copied += bytes
		if err != nil {
			errs = append(errs, fmt.Errorf("relocate segment %d: %w", u.Base, err))
			continue
		}
		res.Relocated++
	}
	deleted, freed, err := e.reclaimDead()
	res.Deleted, res.FreedBytes = deleted, freed
	if err != nil {
		errs = append(errs, err)
	}
	res.Took = time.Since(start)
	e.stats.GCCopiedBytes.Add(res.Copied)
	if res.Relocated > 0 || res.Deleted > 0 || len(errs) > 0 {
		e.log.Info("garbage collection pass", "threshold", threshold, "segments_examined", res.Examined,
			"segments_relocated", res.Relocated, "records_copied", res.Records, "bytes_copied", res.Copied,
			"segments_deleted", res.Deleted, "bytes_freed", res.FreedBytes, "took", res.Took)
	}
	return res, errors.Join(errs...)
}

// scheduledGC is the frequent pass (gcThreshold says which segments it
// relocates).
func (e *Engine) scheduledGC(ctx context.Context) (GCResult, error) {
	return e.GC(ctx, gcThreshold(e.Usage(), e.cfg.GCMinorThreshold, e.cfg.GCMajorThreshold, e.cfg.SegmentSize))
}

// gcPressureMax is the most live a segment may be for the frequent pass to
// relocate it under space pressure: copying it frees at least a quarter of
// it.
const gcPressureMax = 0.75

// gcThreshold is the live fraction up to which the frequent pass relocates
// sealed segments: nearly-dead ones (minor); half-dead ones (major) too
// once the bytes they would free reach two segments or a quarter of the
// log, without waiting for the major pass; and, under space pressure —
// dead bytes in segments at most gcPressureMax live reach two segments and
// a quarter of the log — the least live of those until what stays dead in
// them is under a sixteenth of the log. Expired space thus comes back
// within a retention interval and a pass of copying, however the live and
// the expired data are interleaved (exactly half and half leaves every
// segment a few bytes over half live, which the major threshold never
// takes), and the log stays within about a third more than what it holds.
func gcThreshold(usage []SegmentUsage, minor, major float64, segmentSize int64) float64 {
	type seg struct {
		live float64 // fraction
		dead int64
	}
	var segs []seg
	var total, reclaimable, pressed int64
	for _, u := range usage {
		size := int64(u.End - u.Base)
		total += size
		if !u.Sealed || size == 0 || u.Live == 0 {
			continue // empty segments go with the next reclamation
		}
		s := seg{live: float64(u.Live) / float64(size), dead: size - u.Live}
		if float64(u.Live) <= major*float64(size) {
			reclaimable += s.dead
		}
		if s.live <= gcPressureMax {
			pressed += s.dead
			segs = append(segs, s)
		}
	}
	threshold := minor
	if reclaimable >= 2*segmentSize || (total > 0 && reclaimable*4 >= total && reclaimable >= segmentSize) {
		threshold = max(threshold, major)
	}
	if pressed < 2*segmentSize || pressed*4 < total {
		return threshold
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].live < segs[j].live })
	for _, s := range segs {
		if pressed*16 < total {
			break
		}
		// A hair above the fraction: GC compares live bytes with
		// threshold × size, which may round below them.
		threshold = max(threshold, s.live+1e-9)
		pressed -= s.dead
	}
	return threshold
}

// relocate copies the live records of one segment to the local area.
//
// For a tiered segment about to leave local disk it copies only the pinned
// control records and the live records of queues its object left out,
// leaving the rest where index entries point (in the bucket).
func (e *Engine) relocate(ctx context.Context, u SegmentUsage, th *throttle, tiered *TieredSegment) (int, int64, error) {
	v, err := e.logAt(u.Base).Acquire(u.Base)
	if err != nil {
		return 0, 0, err
	}
	defer v.Release()
	e.gcRelocating.Store(true)
	defer e.gcRelocating.Store(false)
	var batch []*commitlog.Entry
	var froms []model.LogPos
	copies := &localCopies{}
	batchBytes, records := 0, 0
	var copied int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := e.appendCopies(ctx, batch, froms, copies)
		records += n
		copied += int64(batchBytes)
		th.wait(ctx, batchBytes)
		batch, froms, batchBytes = batch[:0], froms[:0], 0
		copies = &localCopies{}
		return err
	}
	for pos := u.Base; pos < u.End; {
		b, ok := v.Bytes(pos, commitlog.HeaderSize)
		var full []byte
		if ok {
			full, ok = v.Bytes(pos, int(binary.LittleEndian.Uint32(b)))
		}
		if !ok {
			return records, copied, fmt.Errorf("%w: record past segment data at %d", model.ErrCorruptRecord, pos)
		}
		h, err := commitlog.DecodeHeader(full)
		if err != nil {
			return records, copied, err
		}
		at := pos
		pos += model.LogPos(h.Length)
		if h.Flags&commitlog.FlagControl != 0 {
			if !e.pinnedControl(&h, full[commitlog.HeaderSize+h.KeysLen:h.Length], at) {
				continue // a control record nothing needs any more
			}
		} else if tiered != nil && tiered.holds(h.Queue) {
			continue // in the bucket
		} else if q, err := e.queue(h.Queue); err != nil || !q.idx.Holds(h.BaseOffset, at) {
			continue // dead: the queue is gone or no longer retains it
		}
		r, err := commitlog.Decode(full)
		if err != nil {
			// Never copy a damaged record; the segment stays.
			e.log.Error("live record fails its checksum; segment kept", "pos", at, "err", err)
			return records, copied, err
		}
		ent := &commitlog.Entry{Format: r.Format, Flags: r.Flags | commitlog.FlagRelocated, Queue: r.Queue, BaseOffset: r.BaseOffset,
			Count: r.Count, Timestamp: r.Timestamp, StoreTime: r.StoreTime, TagHash: r.TagHash, Payload: r.Payload}
		_ = r.EachKey(func(k commitlog.Key) { ent.Keys = append(ent.Keys, k) })
		// A copy keeps its record's term and, as its index, the position
		// of the commit-log record it descends from.
		origin := at
		if at.IsLocal() {
			origin = model.LogPos(r.Index)
		}
		batch = append(batch, ent)
		froms = append(froms, at)
		copies.origins = append(copies.origins, origin)
		copies.terms = append(copies.terms, r.Term)
		batchBytes += int(h.Length)
		if batchBytes >= relocateBatchBytes {
			if err := flush(); err != nil {
				return records, copied, err
			}
		}
	}
	return records, copied, flush()
}

// copyAssigner keeps the offsets of records appended whole (compaction
// results: nothing is indexed at append).
type copyAssigner struct{}

func (copyAssigner) Assign(*commitlog.Entry) {}
func (copyAssigner) Done()                   {}

// appendCopies appends copies to the local area, makes them durable, then
// repoints each entry still on its original. It returns how many moved.
//
// It holds the checkpoint lock throughout, so a checkpoint either comes
// before the copies (recovery replays them) or after every move (its
// live-byte figures and the index files it makes durable agree).
func (e *Engine) appendCopies(ctx context.Context, batch []*commitlog.Entry, froms []model.LogPos, copies *localCopies) (int, error) {
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	end, err := e.local.Append(batch, copies)
	if err != nil {
		return 0, fmt.Errorf("append copies: %w", err)
	}
	if err := e.local.SyncTo(ctx, end); err != nil {
		return 0, err
	}
	moved := 0
	var errs []error
	for i, c := range batch {
		if c.Queue == engineQueue {
			if e.moveKeeperPin(c.Payload, froms[i], c.Pos, c.Size) {
				moved++
			}
			continue
		}
		q, err := e.queue(c.Queue)
		if err != nil {
			continue
		}
		if c.Flags&commitlog.FlagControl != 0 {
			if q.pins.move(c.Payload, froms[i], 0, c.Pos, c.Size) {
				moved++
			}
			continue
		}
		if err := e.noteInPlace(q); err != nil {
			return moved, err
		}
		ok, err := q.idx.Repoint(c.BaseOffset, froms[i], c.Pos, c.Segment, c.Size, c.Count)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			moved++
			e.indexKeys(c.Queue, c.BaseOffset, c.StoreTime, c.Pos, c.Keys)
		}
	}
	return moved, errors.Join(errs...)
}

// indexKeys adds a record's keys to the key index at pos.
func (e *Engine) indexKeys(id model.QueueID, base model.QueueOffset, storeTime int64, pos model.LogPos, keys []commitlog.Key) {
	for _, k := range keys {
		if err := e.keys.Add(keyindex.Hash(k.Key), id, base+model.QueueOffset(k.Delta), storeTime, pos); err != nil {
			e.log.Warn("key index add failed", "queue", id, "err", err)
		}
	}
}

// replayCopy applies a garbage-collection copy that an older version put in
// the commit log itself: the entry moves to it if it still points at an
// earlier position and the record has the copy's size.
func (e *Engine) replayCopy(q *queue, pos model.LogPos, r *commitlog.Record) error {
	e.recount[q] = true
	return e.repointReplayed(q, queueindex.FromEarlierSameSize, pos, r)
}

// replayRewrite applies a compaction result: the entry takes the rewrite's
// content wherever its record is (a copy elsewhere holds the content the
// rewrite replaces).
func (e *Engine) replayRewrite(q *queue, pos model.LogPos, r *commitlog.Record) error {
	e.recount[q] = true
	return e.repointReplayed(q, queueindex.FromAny, pos, r)
}

func (e *Engine) repointReplayed(q *queue, from model.LogPos, pos model.LogPos, r *commitlog.Record) error {
	moved, err := q.idx.Repoint(r.BaseOffset, from, pos, r.Segment, r.Length, r.Count)
	e.keysMoved(moved, pos, r)
	return err
}

// keysMoved adds a replayed record's keys at pos once its entry moved there.
func (e *Engine) keysMoved(moved bool, pos model.LogPos, r *commitlog.Record) {
	if !moved {
		return
	}
	var keys []commitlog.Key
	_ = r.EachKey(func(k commitlog.Key) { keys = append(keys, k) })
	e.indexKeys(r.Queue, r.BaseOffset, r.StoreTime, pos, keys)
}

// throttle paces copying to a byte rate (0: unpaced) while the foreground
// writes; while it is nearly idle (under idleForeground bytes per second
// appended since the last batch) copying is not held back.
type throttle struct {
	rate       int64
	foreground func() int64 // bytes appended so far (nil: always paced)
	start      time.Time
	done       int64
	fgAt       time.Time
	fgBytes    int64
}

// idleForeground is the append rate below which garbage collection copies
// unpaced.
const idleForeground = 1 << 20

func newThrottle(rate int64) *throttle { return &throttle{rate: rate, start: time.Now()} }

func (t *throttle) wait(ctx context.Context, n int) {
	if t.rate <= 0 {
		return
	}
	now := time.Now()
	if t.foreground != nil {
		fg := t.foreground()
		idle := !t.fgAt.IsZero() && float64(fg-t.fgBytes) < idleForeground*now.Sub(t.fgAt).Seconds()
		t.fgAt, t.fgBytes = now, fg
		if idle {
			t.start, t.done = now, 0 // pace from here once the foreground is back
			return
		}
	}
	t.done += int64(n)
	due := t.start.Add(time.Duration(float64(t.done) / float64(t.rate) * float64(time.Second)))
	if d := due.Sub(now); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
}
