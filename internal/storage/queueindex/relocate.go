package queueindex

import (
	"github.com/rosettamq/rosetta/internal/model"
)

// locateLocked finds the retained entry whose record starts at offset base.
// Garbage collection and compaction look entries up in offset order, so
// the entry after the previous one found is tried first, through a small
// read-ahead of the index files.
func (q *Queue) locateLocked(base model.QueueOffset) (int64, Entry, bool) {
	if q.deleted || base >= q.next || q.first >= q.totalLocked() {
		return 0, Entry{}, false
	}
	for _, guess := range [2]int64{q.loc.hint + 1, q.loc.hint} {
		if guess < q.first || guess >= q.totalLocked() {
			continue
		}
		e, err := q.aheadLocked(guess)
		if err == nil && e.BaseOffset <= base && base < e.End() {
			q.loc.hint = guess
			return guess, e, e.BaseOffset == base
		}
	}
	no, e, err := q.searchLocked(func(e Entry) bool { return e.End() > base })
	if err != nil || e.BaseOffset != base {
		return 0, Entry{}, false
	}
	q.loc.hint = no
	return no, e, true
}

// locateAhead is the read-ahead of locateLocked: a run of flushed entries.
type locateAhead struct {
	hint int64
	from int64
	ents []Entry
}

const locateAheadEntries = 256

// aheadLocked reads entry no through the read-ahead.
func (q *Queue) aheadLocked(no int64) (Entry, error) {
	if no >= q.flushed {
		return q.readEntryLocked(no)
	}
	if i := no - q.loc.from; i >= 0 && i < int64(len(q.loc.ents)) {
		return q.loc.ents[i], nil
	}
	n := min(int64(locateAheadEntries), q.flushed-no)
	buf := make([]byte, n*EntrySize)
	if err := q.readFileEntries(no, buf); err != nil {
		return Entry{}, err
	}
	q.loc.from, q.loc.ents = no, q.loc.ents[:0]
	for i := int64(0); i < n; i++ {
		e, err := DecodeEntry(buf[i*EntrySize:])
		if err != nil {
			q.loc.ents = q.loc.ents[:0]
			return Entry{}, err
		}
		q.loc.ents = append(q.loc.ents, e)
	}
	return q.loc.ents[0], nil
}

// Holds reports whether the queue retains the record of offset base at log
// position pos (so the record there is live).
func (q *Queue) Holds(base model.QueueOffset, pos model.LogPos) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, e, ok := q.locateLocked(base)
	return ok && !e.Hole() && e.Pos == pos
}

// Repoint sources: the position an entry must still be at, or one of these
// for recovery replaying a copy.
const (
	// FromEarlierSameSize: the entry is anywhere before the copy and its
	// record has the copy's size (a relocated copy).
	FromEarlierSameSize model.LogPos = -1
	// FromEarlier: the entry is anywhere before the copy (a compacted
	// rewrite, smaller than the original, or a hole before it).
	FromEarlier model.LogPos = -2
	// FromAny: wherever the entry is (a compaction result applied from the
	// log: it replaces the record's content, wherever a copy of it lives).
	FromAny model.LogPos = -3
)

// Repoint moves the entry of offset base to a record at to (in the
// segment based at seg, size bytes) — a copy or a compacted rewrite of
// its record — when it is still at from (or per FromEarlier…). Live bytes
// move with it. It reports whether the entry moved.
func (q *Queue) Repoint(base model.QueueOffset, from, to, seg model.LogPos, size, count uint32) (bool, error) {
	q.fmu.Lock() // a flush in progress would drop a change to the tail it copied
	defer q.fmu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	no, e, ok := q.locateLocked(base)
	if !ok || e.Count != count {
		return false, nil
	}
	switch {
	case from >= 0 && (e.Pos != from || e.Hole()),
		from == FromEarlierSameSize && (e.Pos >= to || e.Size != size),
		from == FromEarlier && !e.Hole() && e.Pos >= to:
		return false, nil
	}
	return true, q.setLocked(no, e, Entry{Pos: to, BaseOffset: e.BaseOffset, Size: size, Count: e.Count, MaxTime: e.MaxTime, TagHash: e.TagHash, Segment: seg})
}

// RepointCopy applies a copy found by recovery: the entry of offset base
// moves to it (at to, in the segment based at seg) if it is at the copy's
// origin, or at an earlier local-area copy of the same size (a copy of a
// copy). It reports whether the entry moved.
func (q *Queue) RepointCopy(base model.QueueOffset, origin, to, seg model.LogPos, size, count uint32) (bool, error) {
	q.fmu.Lock() // a flush in progress would drop a change to the tail it copied
	defer q.fmu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	no, e, ok := q.locateLocked(base)
	if !ok || e.Count != count || e.Hole() {
		return false, nil
	}
	if e.Pos != origin && !(e.Pos.IsLocal() && e.Pos < to && e.Size == size) {
		return false, nil
	}
	return true, q.setLocked(no, e, Entry{Pos: to, BaseOffset: e.BaseOffset, Size: size, Count: e.Count, MaxTime: e.MaxTime, TagHash: e.TagHash, Segment: seg})
}

// Punch makes the entry of offset base, still at from (or anywhere, with
// FromAny), a hole: none of
// its messages is kept (compaction removed them all). Readers step over
// it; its offsets stay used.
func (q *Queue) Punch(base model.QueueOffset, from model.LogPos) (bool, error) {
	q.fmu.Lock() // a flush in progress would drop a change to the tail it copied
	defer q.fmu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	no, e, ok := q.locateLocked(base)
	if !ok || e.Hole() || (from != FromAny && e.Pos != from) {
		return false, nil
	}
	return true, q.setLocked(no, e, Entry{BaseOffset: e.BaseOffset, Count: e.Count, MaxTime: e.MaxTime})
}

// setLocked replaces entry number no (now old) with e, moving live bytes.
func (q *Queue) setLocked(no int64, old, e Entry) error {
	oldSeg := old.Segment
	if no < q.flushed {
		oldSeg = q.store.segment(old.Pos)
	}
	if !old.Hole() {
		q.countLocked(oldSeg, -int64(old.Size))
	}
	if !e.Hole() {
		q.countLocked(e.Segment, int64(e.Size))
	}
	if no >= q.flushed {
		q.tail[no-q.flushed] = e
		return nil
	}
	if i := no - q.loc.from; i >= 0 && i < int64(len(q.loc.ents)) {
		q.loc.ents[i] = e
	}
	var b [EntrySize]byte
	e.Encode(b[:])
	return q.writeEntries(no, b[:])
}
