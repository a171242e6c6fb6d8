package queueindex

import (
	"github.com/rosettamq/rosetta/internal/model"
)

// locateLocked finds the retained entry whose record starts at offset base.
func (q *Queue) locateLocked(base model.QueueOffset) (int64, Entry, bool) {
	if q.deleted || base >= q.next || q.first >= q.totalLocked() {
		return 0, Entry{}, false
	}
	no, e, err := q.searchLocked(func(e Entry) bool { return e.End() > base })
	if err != nil || e.BaseOffset != base {
		return 0, Entry{}, false
	}
	return no, e, true
}

// Holds reports whether the queue retains the record of offset base at log
// position pos (so the record there is live).
func (q *Queue) Holds(base model.QueueOffset, pos model.LogPos) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, e, ok := q.locateLocked(base)
	return ok && e.Pos == pos
}

// Repoint moves the entry of offset base to a copy of its record at to (in
// the segment based at seg) when it is still at from; with from < 0
// (recovery replaying a copy) when it is anywhere before to and the sizes
// agree. Live bytes move with it. It reports whether the entry moved.
func (q *Queue) Repoint(base model.QueueOffset, from, to, seg model.LogPos, size, count uint32) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	no, e, ok := q.locateLocked(base)
	if !ok || e.Count != count {
		return false, nil
	}
	if from >= 0 && e.Pos != from || from < 0 && (e.Pos >= to || e.Size != size) {
		return false, nil
	}
	oldSeg := e.Segment
	if no < q.flushed {
		oldSeg = q.store.segment(e.Pos)
	}
	q.countLocked(oldSeg, -int64(e.Size))
	e.Pos, e.Size, e.Segment = to, size, seg
	q.countLocked(seg, int64(size))
	if no >= q.flushed {
		q.tail[no-q.flushed] = e
		return true, nil
	}
	var b [EntrySize]byte
	e.Encode(b[:])
	if err := q.writeEntries(no, b[:]); err != nil {
		return true, err
	}
	return true, nil
}
