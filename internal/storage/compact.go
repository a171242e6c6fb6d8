package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// Rewrite replaces one record of a queue with a compacted version of it
// (the broker decides what a record keeps; the engine moves the index).
type Rewrite struct {
	Base model.QueueOffset
	// Record is the compacted version: payload, message count kept in
	// Count's range, timestamps, tag hash, keys. nil: none of the
	// record's messages is kept (the entry becomes a hole).
	Record *Record
}

// RewriteRecords applies compaction to queue id. The results are records
// of the replicated log, so every replica and every replay applies the
// same ones: a rewrite carries the compacted version (flag Compacted, with
// the original's queue, base offset and count), a hole is a control
// record naming the base offset. Once they are durable each entry takes
// its result wherever its record lives (a garbage-collection copy holds
// the same content as the original the broker read). The originals become
// dead bytes that reclamation and garbage collection free. It returns how
// many entries changed. Like relocation it holds the checkpoint lock, so a
// checkpoint comes either before (recovery replays the results) or after
// every change.
func (e *Engine) RewriteRecords(ctx context.Context, id model.QueueID, rws []Rewrite) (int, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, err
	}
	recs := make([]*commitlog.Entry, 0, len(rws))
	for i := range rws {
		r := rws[i].Record
		if r == nil {
			_, ent, err := q.idx.Lookup(rws[i].Base)
			if err != nil || ent.BaseOffset != rws[i].Base {
				continue // no longer retained
			}
			p := make([]byte, 13)
			p[0] = opHole
			binary.LittleEndian.PutUint64(p[1:], uint64(rws[i].Base))
			binary.LittleEndian.PutUint32(p[9:], ent.Count)
			recs = append(recs, &commitlog.Entry{Format: model.FormatInternal, Flags: commitlog.FlagControl, Queue: id, Count: 1, Payload: p})
			continue
		}
		if r.Count == 0 {
			return 0, fmt.Errorf("%w: rewrite of offset %d with no count", model.ErrCorruptRecord, rws[i].Base)
		}
		r.Queue, r.BaseOffset = id, rws[i].Base
		r.Flags = r.Flags&^commitlog.FlagRelocated | commitlog.FlagCompacted
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	if err := e.writeDurable(ctx, recs, copyAssigner{}); err != nil {
		return 0, fmt.Errorf("append compaction results: %w", err)
	}
	e.noteApplied(recs)
	if err := e.noteInPlace(q); err != nil {
		return 0, err
	}
	changed := 0
	var errs []error
	for i, rw := range rws {
		var ok bool
		var err error
		if rw.Record != nil {
			r := recs[i]
			ok, err = q.idx.Repoint(rw.Base, queueindex.FromAny, r.Pos, r.Segment, r.Size, r.Count)
		} else {
			ok, err = q.idx.Punch(rw.Base, queueindex.FromAny)
			if ok {
				q.pins.set(recs[i].Payload, recs[i].Pos, recs[i].Size)
			}
		}
		if ok {
			changed++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return changed, errors.Join(errs...)
}

// BytesBetween sums the stored bytes of a queue's records holding offsets
// in [from, to), and returns a timestamp bound of the first (its running
// maximum timestamp).
func (e *Engine) BytesBetween(id model.QueueID, from, to model.QueueOffset) (int64, int64, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, 0, err
	}
	return q.idx.BytesBetween(from, to)
}
