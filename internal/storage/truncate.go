package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// Truncation by record index: a Raft follower whose tail diverges from a
// new leader's cuts it and appends the leader's records instead. What the
// engine derived from the cut records at append is rolled back:
//
//   - queue index entries: each queue touched is cut at the first offset a
//     cut record assigned (its next offset goes back there);
//   - leader epochs of those offsets;
//   - queues created by cut control records are dropped;
//   - state keepers (idempotent producers, the transaction index) are
//     restored from the last checkpoint's sections and the log replayed
//     through them from the checkpoint to the cut.
//
// Effects the engine applies in place once a record is durable — start
// moves, compaction results and holes, queue deletion — are applied only
// from committed records in a cluster (the commit index is what a leader
// never takes back), so truncation never reaches them: TruncateAfter
// refuses a cut below the newest such record, and below the last
// checkpoint (checkpoints cover committed records only). The local area is
// not touched: its copies are of records older than either bound.
// Key-index entries of cut records stay; key lookups compare the record
// read back, and the re-appended records add their own.

// ErrTruncateCommitted refuses a truncation below what may no longer be
// taken back.
var ErrTruncateCommitted = errors.New("truncation below an applied record")

// TruncateAfter drops every record with an index above i and rolls back the
// state derived from them. Appends must not run concurrently (a follower
// truncates between appends); readers may.
func (e *Engine) TruncateAfter(i model.Index) error {
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	next := e.clog.NextIndex()
	if i+1 >= next {
		return nil
	}
	if floor := model.Index(e.appliedFloor.Load()); i < floor {
		return fmt.Errorf("%w: index %d is below %d, the newest record applied in place", ErrTruncateCommitted, i, floor)
	}
	if i+1 < e.ckptIndex {
		return fmt.Errorf("%w: index %d is below the last checkpoint (%d)", ErrTruncateCommitted, i, e.ckptIndex)
	}
	if err := e.clog.FlushPending(); err != nil { // the scan below reads the mapping
		return err
	}
	cut, err := e.clog.PositionOf(i + 1)
	if err != nil {
		return err
	}
	// What the cut records derived.
	from := map[model.QueueID]model.QueueOffset{}
	var created []model.QueueID
	err = e.clog.Scan(cut, func(_ model.LogPos, r *commitlog.Record) error {
		switch {
		case r.Flags&commitlog.FlagControl != 0:
			if len(r.Payload) > 0 && r.Payload[0] == opCreateQueue {
				created = append(created, r.Queue)
			}
		case r.Flags&(commitlog.FlagCompacted|commitlog.FlagRelocated) == 0:
			if off, ok := from[r.Queue]; !ok || r.BaseOffset < off {
				from[r.Queue] = r.BaseOffset
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := e.clog.TruncateAfter(i); err != nil {
		return err
	}
	if e.cfg.Replicated {
		e.repl.mu.Lock()
		e.repl.deferred = slices.DeleteFunc(e.repl.deferred, func(d deferredRecord) bool { return d.entry.Index > i })
		e.repl.mu.Unlock()
		e.repl.truncations.Add(1)
		defer e.repl.broadcast()
	}
	var errs []error
	for id, off := range from {
		q, err := e.queue(id)
		if err != nil {
			continue
		}
		if _, err := q.idx.TruncateFromOffset(off); err != nil {
			errs = append(errs, err)
		}
		q.epochs.truncateFrom(off)
	}
	for _, id := range created {
		e.qmu.Lock()
		q := e.queues[id]
		delete(e.queues, id)
		e.qmu.Unlock()
		if q != nil {
			errs = append(errs, q.idx.Delete())
			q.wake()
		}
	}
	errs = append(errs, e.rebuildKeepers(cut))
	e.log.Info("log truncated", "after_index", i, "at", cut, "queues_cut", len(from), "queues_dropped", len(created))
	return errors.Join(errs...)
}

// rebuildKeepers restores every state keeper from the last checkpoint and
// replays the data records from there to end.
func (e *Engine) rebuildKeepers(end model.LogPos) error {
	if len(e.cfg.StateKeepers) == 0 {
		return nil
	}
	for _, k := range e.cfg.StateKeepers {
		if err := k.Restore(e.ckptSections[k.Name()]); err != nil {
			return fmt.Errorf("restore %s: %w", k.Name(), err)
		}
	}
	err := e.clog.Scan(e.lastCheckpoint(), func(pos model.LogPos, r *commitlog.Record) error {
		if pos >= end {
			return errStopScan
		}
		if r.Flags&(commitlog.FlagControl|commitlog.FlagCompacted|commitlog.FlagRelocated) != 0 {
			return nil
		}
		for _, k := range e.cfg.StateKeepers {
			k.Replay(pos, r)
		}
		return nil
	})
	if errors.Is(err, errStopScan) {
		return nil
	}
	return err
}

// errStopScan ends a scan early.
var errStopScan = errors.New("stop scan")

// noteApplied raises the truncation floor to the newest of recs (records
// whose effect was applied in place).
func (e *Engine) noteApplied(recs []*commitlog.Entry) {
	for _, r := range recs {
		if idx := int64(r.Index); idx > e.appliedFloor.Load() {
			e.appliedFloor.Store(idx)
		}
	}
}

// AppendEntries appends records another log holds — a leader's, or a cut
// tail applied again — with their own terms and indexes. They must continue
// this log's index sequence, and each data record must get the base offset
// it had there (offsets are assigned deterministically, so a log applying
// the same records assigns the same ones). Control records and compaction
// results take effect as when written here; state keepers replay the data
// records. The records are durable under the engine's policy on return.
func (e *Engine) AppendEntries(ctx context.Context, ents []commitlog.IndexedEntry) error {
	if len(ents) == 0 {
		return nil
	}
	recs := make([]*commitlog.Entry, len(ents))
	a := &entryAssigner{e: e, want: make([]commitlog.Record, len(ents))}
	for i, ent := range ents {
		r, err := commitlog.Decode(ent.Data)
		if err != nil {
			return err
		}
		if r.Index != ent.Index {
			return fmt.Errorf("%w: entry %d holds record index %d", model.ErrCorruptRecord, ent.Index, r.Index)
		}
		en := &commitlog.Entry{Format: r.Format, Flags: r.Flags, Queue: r.Queue, BaseOffset: r.BaseOffset, Count: r.Count,
			Timestamp: r.Timestamp, StoreTime: r.StoreTime, TagHash: r.TagHash, Payload: r.Payload}
		_ = r.EachKey(func(k commitlog.Key) { en.Keys = append(en.Keys, k) })
		recs[i], a.want[i] = en, r
	}
	if next := e.clog.NextIndex(); ents[0].Index != next {
		return fmt.Errorf("%w: entries start at index %d, the log continues at %d", model.ErrCorruptRecord, ents[0].Index, next)
	}
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	var end model.LogPos
	var err error
	if e.cfg.Replicated {
		e.repl.pause.RLock()
		e.replicaStoring.Add(1)
		end, err = e.clog.AppendReplica(recs, a)
		e.replicaStoring.Add(-1)
		e.repl.pause.RUnlock()
	} else {
		end, err = e.clog.Append(recs, a)
	}
	if err == nil {
		err = a.err
	}
	if err != nil {
		return fmt.Errorf("append entries: %w", err)
	}
	if !e.cfg.Replicated || e.cfg.Durability == DurabilitySync {
		if err := e.clog.SyncTo(ctx, end); err != nil {
			return err
		}
	}
	var inPlace []deferredRecord
	for i, en := range recs {
		r := a.want[i]
		r.Pos, r.Segment = en.Pos, en.Segment
		switch {
		case en.Flags&commitlog.FlagControl != 0 && inPlaceOp(en.Payload),
			en.Flags&commitlog.FlagCompacted != 0:
			inPlace = append(inPlace, deferredRecord{entry: en, record: r})
		case en.Flags&(commitlog.FlagControl|commitlog.FlagRelocated) == 0:
			for _, k := range e.cfg.StateKeepers {
				k.Replay(en.Pos, &r)
			}
		}
	}
	if e.cfg.Replicated {
		// Only committed records change anything in place.
		e.repl.mu.Lock()
		e.repl.deferred = append(e.repl.deferred, inPlace...)
		e.repl.mu.Unlock()
		return nil
	}
	return e.applyInPlace(inPlace)
}

// applyInPlace applies what another log's records change in place: queue
// starts, compaction holes and results, queue deletion.
func (e *Engine) applyInPlace(recs []deferredRecord) error {
	var errs []error
	for i := range recs {
		en, r := recs[i].entry, &recs[i].record
		q, qerr := e.queue(en.Queue)
		switch {
		case en.Flags&commitlog.FlagControl != 0:
			if len(en.Payload) >= 9 && qerr == nil {
				off := model.QueueOffset(binary.LittleEndian.Uint64(en.Payload[1:]))
				switch en.Payload[0] {
				case opSetStart:
					q.pins.set(en.Payload, en.Pos, en.Size)
					errs = append(errs, q.idx.SetStart(off))
				case opHole:
					ok, err := q.idx.Punch(off, queueindex.FromAny)
					if ok {
						q.pins.set(en.Payload, en.Pos, en.Size)
					}
					errs = append(errs, err, e.noteInPlace(q))
				}
			}
			if len(en.Payload) > 0 && (en.Payload[0] == opDeleteQueue && e.cfg.Replicated || tierOp(en.Payload)) {
				e.applyControl(en.Queue, en.Payload, en.Pos, en.Size)
			}
		case en.Flags&commitlog.FlagCompacted != 0:
			if qerr == nil {
				errs = append(errs, e.noteInPlace(q), e.repointReplayed(q, queueindex.FromAny, en.Pos, r))
			}
		}
		e.noteApplied([]*commitlog.Entry{en})
	}
	return errors.Join(errs...)
}

// entryAssigner writes records with the terms and offsets they carry,
// indexing data records and applying queue creation and deletion as the
// log's own assigners do.
type entryAssigner struct {
	e    *Engine
	want []commitlog.Record
	i    int
	qs   []*queue
	err  error
}

func (a *entryAssigner) Assign(en *commitlog.Entry) {
	w := &a.want[a.i]
	a.i++
	en.Term = w.Term
	if en.Index != w.Index && a.err == nil {
		a.err = fmt.Errorf("%w: record index %d written as %d", model.ErrCorruptRecord, w.Index, en.Index)
	}
	switch {
	case en.Flags&commitlog.FlagControl != 0:
		if (len(en.Payload) >= 9 && (en.Payload[0] == opSetStart || en.Payload[0] == opHole)) || tierOp(en.Payload) {
			return // applied once durable
		}
		if len(en.Payload) > 0 && en.Payload[0] == opDeleteQueue && a.e.cfg.Replicated {
			return // applied once committed
		}
		a.e.applyControl(en.Queue, en.Payload, en.Pos, en.Size)
	case en.Flags&(commitlog.FlagCompacted|commitlog.FlagRelocated) != 0:
		// A compaction result keeps its offsets; applied once durable.
	default:
		q, err := a.e.queue(en.Queue)
		if err != nil {
			if a.err == nil {
				a.err = err
			}
			return
		}
		a.e.index(q, en.Queue, en.Pos, en)
		if en.BaseOffset != w.BaseOffset && a.err == nil {
			a.err = fmt.Errorf("%w: queue %d record %d assigned offset %d, carries %d", model.ErrCorruptRecord, en.Queue, w.Index, en.BaseOffset, w.BaseOffset)
		}
		a.qs = append(a.qs, q)
	}
}

func (a *entryAssigner) Done() { a.e.markPending(a.qs) }
