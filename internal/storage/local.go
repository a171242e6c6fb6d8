package storage

import (
	"cmp"
	"encoding/binary"
	"path/filepath"
	"slices"

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
// record the header keeps the term of the record it copies, and its Index
// holds the commit-log position that record descends from (its origin), so
// recovery moves an entry to a copy only if the entry is still at the
// origin (or at an earlier copy of it); and a node rebuilt from its logs
// alone, whose commit log lost the segments garbage collection emptied,
// applies each copy where its origin was in the commit log's order.
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

// openLocal opens the local area (its copies are replayed by replayLocal
// once the commit log's tail is).
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
		// A copy's index is its origin, its term its record's.
		ForeignIndexes: true,
	}, rec, nil)
	if err == nil {
		e.localCkpt.Store(int64(max(rec.Pos, model.LocalPosBase)))
	}
	return err
}

// replayLocalTail replays the copies made after the checkpoint.
func (e *Engine) replayLocalTail() error {
	return e.local.Scan(model.LogPos(e.localCkpt.Load()), e.replayLocal)
}

// localCopy is a copy read from the local area for a rebuild.
type localCopy struct {
	pos model.LogPos
	rec commitlog.Record
}

// originMerger rebuilds, from the log alone, the records whose commit-log
// segments are gone: their copies are applied in the commit log's order,
// where their origins were. A copy whose origin the commit log still has
// is left to replayLocal.
type originMerger struct {
	e       *Engine
	pending []localCopy // by origin, then position
	// holes whose records may be gone, by queue in offset order: a hole
	// is made before the first record indexed after it.
	holes map[model.QueueID][]localCopy
}

// newOriginMerger collects every copy in the local area.
func (e *Engine) newOriginMerger() (*originMerger, error) {
	m := &originMerger{e: e}
	err := e.local.Scan(model.LocalPosBase, func(pos model.LogPos, r *commitlog.Record) error {
		m.pending = append(m.pending, localCopy{pos, *r})
		return nil
	})
	slices.SortStableFunc(m.pending, func(a, b localCopy) int { return cmp.Compare(a.rec.Index, b.rec.Index) })
	m.holes = map[model.QueueID][]localCopy{}
	for _, c := range m.pending {
		if c.rec.Flags&commitlog.FlagControl != 0 && len(c.rec.Payload) == 13 && c.rec.Payload[0] == opHole {
			m.holes[c.rec.Queue] = append(m.holes[c.rec.Queue], c)
		}
	}
	for _, hs := range m.holes {
		slices.SortFunc(hs, func(a, b localCopy) int { return cmp.Compare(holeBase(&a.rec), holeBase(&b.rec)) })
	}
	return m, err
}

func holeBase(r *commitlog.Record) model.QueueOffset {
	return model.QueueOffset(binary.LittleEndian.Uint64(r.Payload[1:]))
}

// holesBefore makes the holes of queue id below offset off that come after
// what the queue has indexed.
func (m *originMerger) holesBefore(id model.QueueID, off model.QueueOffset) {
	hs := m.holes[id]
	q := m.e.queues[id]
	for len(hs) > 0 && holeBase(&hs[0].rec) < off {
		if q != nil {
			if base := holeBase(&hs[0].rec); base >= q.idx.NextOffset() {
				q.idx.SetNext(base)
				q.idx.Assign(0, 0, 0, binary.LittleEndian.Uint32(hs[0].rec.Payload[9:]), 0, 0)
				// The record's own term is gone with it; the hole's is
				// the nearest the log still has.
				q.epochs.note(hs[0].rec.Term.LeaderEpoch(), base)
				m.e.recount[q] = true
			}
		}
		hs = hs[1:]
	}
	m.holes[id] = hs
}

// before applies the copies whose origins lie before pos and were not
// scanned (their segment is gone), and drops those of the record at pos,
// and makes the holes that come before r (nil at the end).
func (m *originMerger) before(pos model.LogPos, r *commitlog.Record) error {
	defer func() {
		if r == nil {
			for id := range m.holes {
				m.holesBefore(id, 1<<62)
			}
		} else if r.Flags&(commitlog.FlagControl|commitlog.FlagCompacted|commitlog.FlagRelocated) == 0 {
			m.holesBefore(r.Queue, r.BaseOffset+1)
		}
	}()
	for len(m.pending) > 0 && model.LogPos(m.pending[0].rec.Index) <= pos {
		c := m.pending[0]
		m.pending = m.pending[1:]
		if model.LogPos(c.rec.Index) == pos && c.rec.Queue != engineQueue {
			continue // the original is here
		}
		if c.rec.Flags&(commitlog.FlagControl|commitlog.FlagCompacted) == 0 {
			m.holesBefore(c.rec.Queue, c.rec.BaseOffset+1)
		}
		if err := m.e.applyCopyAtOrigin(c.pos, &c.rec); err != nil {
			return err
		}
	}
	return nil
}

// applyCopyAtOrigin applies a copy as its original would have been.
func (e *Engine) applyCopyAtOrigin(pos model.LogPos, r *commitlog.Record) error {
	if r.Queue == engineQueue && r.Flags&commitlog.FlagControl != 0 {
		e.keeperSnapshotRecord(r.Payload, model.LogPos(r.Index), pos, r.Length)
		return nil
	}
	if r.Flags&commitlog.FlagControl != 0 {
		e.applyControl(r.Queue, r.Payload, pos, r.Length)
		return nil
	}
	q := e.queues[r.Queue]
	if q == nil {
		return nil
	}
	if r.Flags&commitlog.FlagCompacted != 0 {
		return e.replayRewrite(q, pos, r)
	}
	for _, k := range e.cfg.StateKeepers {
		k.Replay(pos, r)
	}
	if e.indexReplayed(q, pos, r) {
		e.recount[q] = true
	}
	return nil
}

// replayLocal applies a copy found by recovery: its entry moves to it if it
// is still at the copy's origin.
func (e *Engine) replayLocal(pos model.LogPos, r *commitlog.Record) error {
	if r.Queue == engineQueue && r.Flags&commitlog.FlagControl != 0 {
		e.keeperSnapshotRecord(r.Payload, model.LogPos(r.Index), pos, r.Length)
		return nil
	}
	q := e.queues[r.Queue]
	if q == nil {
		return nil
	}
	origin := model.LogPos(r.Index)
	if r.Flags&commitlog.FlagControl != 0 {
		q.pins.move(r.Payload, -1, origin, pos, r.Length)
		return nil
	}
	e.recount[q] = true
	moved, err := q.idx.RepointCopy(r.BaseOffset, origin, pos, r.Segment, r.Length, r.Count)
	e.keysMoved(moved, pos, r)
	return err
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
	base, ok := e.logAt(pos).SegmentBase(pos)
	if !ok && !pos.IsLocal() {
		// Deleted locally: a tiered segment's entries still count in it.
		if s := e.manifest.find(pos); s != nil {
			return s.Base
		}
	}
	return base
}

// localCopies is the assigner of copies appended to the local area: each
// record keeps its term, and its index is its origin.
type localCopies struct {
	origins []model.LogPos
	terms   []model.Term
	next    int
}

func (a *localCopies) Assign(en *commitlog.Entry) {
	en.Index, en.Term = model.Index(a.origins[a.next]), a.terms[a.next]
	a.next++
}

func (a *localCopies) Done() {}

// localTail encodes the local area's tail for the checkpoint.
func (e *Engine) localTail() []byte {
	pos, next := e.local.Tail()
	b := binary.LittleEndian.AppendUint64(nil, uint64(pos))
	return binary.LittleEndian.AppendUint64(b, uint64(next))
}
