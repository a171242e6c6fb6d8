package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// Rewrite replaces one record of a queue with a compacted version of it
// (the broker decides what a record keeps; the engine moves the index).
type Rewrite struct {
	Base model.QueueOffset
	From model.LogPos // position of the record it replaces
	// Record is the compacted version: payload, message count kept in
	// Count's range, timestamps, tag hash, keys. nil: none of the
	// record's messages is kept (the entry becomes a hole).
	Record *Record
}

// RewriteRecords applies compaction to queue id: the new versions are
// appended (FlagRelocated|FlagCompacted, with the original's queue, base
// offset and count) and made durable and visible; then each entry still at
// its From moves to its rewrite or becomes a hole. The originals become
// dead bytes that reclamation and garbage collection free. It returns how
// many entries changed. Like relocation it holds the checkpoint lock, so a
// checkpoint comes either before (recovery replays the rewrites) or after
// every change.
func (e *Engine) RewriteRecords(ctx context.Context, id model.QueueID, rws []Rewrite) (int, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, err
	}
	var recs []*commitlog.Entry
	for i := range rws {
		r := rws[i].Record
		if r == nil {
			continue
		}
		if r.Count == 0 {
			return 0, fmt.Errorf("%w: rewrite of offset %d with no count", model.ErrCorruptRecord, rws[i].Base)
		}
		r.Queue, r.BaseOffset = id, rws[i].Base
		r.Flags |= commitlog.FlagRelocated | commitlog.FlagCompacted
		recs = append(recs, r)
	}
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	if len(recs) > 0 {
		end, err := e.clog.Append(recs, copyAssigner{})
		if err != nil {
			return 0, fmt.Errorf("append rewrites: %w", err)
		}
		if err := e.clog.SyncTo(ctx, end); err != nil {
			return 0, err
		}
	}
	if err := e.noteInPlace(q); err != nil {
		return 0, err
	}
	changed := 0
	var errs []error
	for _, rw := range rws {
		var ok bool
		var err error
		if r := rw.Record; r != nil {
			ok, err = q.idx.Repoint(rw.Base, rw.From, r.Pos, r.Segment, r.Size, r.Count)
		} else {
			ok, err = q.idx.Punch(rw.Base, rw.From)
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
