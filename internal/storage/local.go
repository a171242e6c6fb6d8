package storage

import (
	"encoding/binary"
	"path/filepath"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// The local area: where garbage collection puts the live records it moves
// out of mostly-dead segments. It is a second commit log of the same
// record format in <data>/storage/local, whose positions start at
// model.LocalPosBase, so one position space covers both logs and an index
// entry says by its position alone which log holds its record. Its records
// are never replicated and take no index from the replicated sequence:
// the commit log's record indexes stay exactly what the leader assigned,
// and truncating the commit log's tail never cuts a copy. In a local
// record the header's Term holds the position of the record it copies
// (its origin), so recovery moves an entry to a copy only if the entry is
// still at the copy's origin.
//
// Copies are made durable before any entry points at them; a local
// segment is deleted, like a commit-log segment, once nothing retains it
// and a checkpoint covers the moves that emptied it. The checkpoint
// records the local area's tail (section storage.local-area), and
// recovery replays the copies after it once the commit log's tail is
// replayed (a compaction result in the commit log replaces a record's
// content wherever it is; a copy made before it then no longer matches its
// origin and is skipped).

// localSection names the checkpoint section holding the local area's tail.
const localSection = "storage.local-area"

// openLocal opens the local area and replays the copies made after the
// checkpoint.
func (e *Engine) openLocal(sections map[string][]byte) error {
	rec := commitlog.Recovery{Pos: model.LocalPosBase}
	if b := sections[localSection]; len(b) == 16 {
		rec.Pos = model.LogPos(binary.LittleEndian.Uint64(b))
		rec.NextIndex = model.Index(binary.LittleEndian.Uint64(b[8:]))
	}
	var err error
	e.local, err = commitlog.Open(commitlog.Options{
		Dir:           filepath.Join(e.cfg.Dir, "local"),
		SegmentSize:   e.cfg.SegmentSize,
		Mode:          commitlog.SyncAsync, // every copy is synced explicitly before use
		FlushInterval: e.cfg.FlushInterval,
		Logger:        e.cfg.Logger.With("area", "local"),
		Now:           e.cfg.Now,
		BeforeRoll:    e.checkDiskNow,
	}, rec, e.replayLocal)
	if err == nil {
		e.localCkpt.Store(int64(max(rec.Pos, model.LocalPosBase)))
	}
	return err
}

// replayLocal applies a copy found by recovery: its entry moves to it if it
// is still at the copy's origin.
func (e *Engine) replayLocal(pos model.LogPos, r *commitlog.Record) error {
	q := e.queues[r.Queue]
	if q == nil || r.Flags&commitlog.FlagControl != 0 {
		return nil
	}
	e.recount[q] = true
	return e.repointReplayed(q, model.LogPos(r.Term), pos, r)
}

// logAt returns the log holding position pos.
func (e *Engine) logAt(pos model.LogPos) *commitlog.Log {
	if pos.IsLocal() {
		return e.local
	}
	return e.clog
}

// segmentBase returns the base of the segment holding pos, in either log.
func (e *Engine) segmentBase(pos model.LogPos) model.LogPos {
	base, _ := e.logAt(pos).SegmentBase(pos)
	return base
}

// localCopies is the assigner of copies appended to the local area: each
// record's Term carries its origin.
type localCopies struct {
	origins []model.LogPos
	next    int
}

func (a *localCopies) Assign(en *commitlog.Entry) {
	en.Term = model.Term(a.origins[a.next])
	a.next++
}

func (a *localCopies) Done() {}

// localTail encodes the local area's tail for the checkpoint.
func (e *Engine) localTail() []byte {
	pos, next := e.local.Tail()
	b := binary.LittleEndian.AppendUint64(nil, uint64(pos))
	return binary.LittleEndian.AppendUint64(b, uint64(next))
}
