package queueindex

import (
	"maps"

	"github.com/rosettamq/rosetta/internal/model"
)

// SegmentBytes is what a queue's retained entries occupy in each
// commit-log segment, by segment base: the queue's share of the segment's
// live bytes. It is kept up to date as entries are added, dropped and
// moved, never by rescanning.
type SegmentBytes map[model.LogPos]int64

// Total is the sum over segments.
func (b SegmentBytes) Total() int64 {
	var n int64
	for _, v := range b {
		n += v
	}
	return n
}

func (b SegmentBytes) add(seg model.LogPos, n int64) {
	if v := b[seg] + n; v != 0 {
		b[seg] = v
	} else {
		delete(b, seg)
	}
}

// Bytes returns a copy of the queue's live bytes per segment.
func (q *Queue) Bytes() SegmentBytes {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.bytes)
}

// TotalBytes is the size of the queue's retained records.
func (q *Queue) TotalBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}

// BytesIn is the queue's live bytes in the segment based at seg.
func (q *Queue) BytesIn(seg model.LogPos) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes[seg]
}

// StateWithBytes is State plus the live bytes of the entries State covers
// (the flushed ones), captured together for a checkpoint.
func (q *Queue) StateWithBytes() (State, SegmentBytes) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := maps.Clone(q.bytes)
	for _, e := range q.tail {
		b.add(e.Segment, -int64(e.Size))
	}
	return q.stateLocked(), b
}

// countLocked accounts for an entry added (n > 0) or dropped (n < 0).
func (q *Queue) countLocked(seg model.LogPos, n int64) {
	q.bytes.add(seg, n)
	q.total += n
}

// dropLocked uncounts the entries [from, to), which are about to be
// forgotten; segmentOf maps a flushed entry's position to its segment.
func (q *Queue) dropLocked(from, to int64) error {
	const chunk = 1024
	buf := make([]byte, 0, chunk*EntrySize)
	for no := from; no < to; {
		if no >= q.flushed {
			for i := no - q.flushed; i < int64(len(q.tail)) && no < to; i++ {
				q.countLocked(q.tail[i].Segment, -int64(q.tail[i].Size))
				no++
			}
			return nil
		}
		n := min(chunk, q.flushed-no, to-no)
		buf = buf[:n*EntrySize]
		if err := q.readFileEntries(no, buf); err != nil {
			return err
		}
		for i := int64(0); i < n; i++ {
			e, err := DecodeEntry(buf[i*EntrySize:])
			if err != nil {
				return err
			}
			q.countLocked(q.store.segment(e.Pos), -int64(e.Size))
		}
		no += n
	}
	return nil
}

// RebuildBytes recounts the live bytes from the entries (for indexes
// checkpointed before accounting existed).
func (q *Queue) RebuildBytes() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bytes, q.total = SegmentBytes{}, 0
	return q.eachEntryLocked(q.first, func(e Entry, seg model.LogPos) bool {
		q.countLocked(seg, int64(e.Size))
		return true
	})
}

// StartKeeping returns the start offset at which the queue keeps at most
// keep bytes, dropping its oldest entries (never the newest one).
func (q *Queue) StartKeeping(keep int64) (model.QueueOffset, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	start, total := q.start, q.total
	if total <= keep {
		return start, nil
	}
	last := q.totalLocked() - 1
	no := q.first
	err := q.eachEntryLocked(q.first, func(e Entry, _ model.LogPos) bool {
		if total <= keep || no >= last {
			return false
		}
		total -= int64(e.Size)
		start = max(start, e.End())
		no++
		return true
	})
	return start, err
}

// eachEntryLocked calls fn with every entry from number from on, until fn
// returns false.
func (q *Queue) eachEntryLocked(from int64, fn func(Entry, model.LogPos) bool) error {
	const chunk = 1024
	buf := make([]byte, chunk*EntrySize)
	no := max(from, q.first)
	for no < q.flushed {
		n := min(chunk, q.flushed-no)
		if err := q.readFileEntries(no, buf[:n*EntrySize]); err != nil {
			return err
		}
		for i := int64(0); i < n; i++ {
			e, err := DecodeEntry(buf[i*EntrySize:])
			if err != nil {
				return err
			}
			if !fn(e, q.store.segment(e.Pos)) {
				return nil
			}
		}
		no += n
	}
	for i := no - q.flushed; i < int64(len(q.tail)); i++ {
		if !fn(q.tail[i], q.tail[i].Segment) {
			return nil
		}
	}
	return nil
}

// segment maps a position to its segment's base (0 until SetSegmentOf).
func (s *Store) segment(pos model.LogPos) model.LogPos {
	if s.segmentOf == nil {
		return 0
	}
	return s.segmentOf(pos)
}

// BytesBetween sums the sizes of the retained entries holding offsets in
// [from, to) and returns the first one's timestamp bound (its MaxTime).
func (q *Queue) BytesBetween(from, to model.QueueOffset) (int64, int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	from = max(from, q.start)
	if from >= to || from >= q.next {
		return 0, 0, nil
	}
	no, _, err := q.searchLocked(func(e Entry) bool { return e.End() > from })
	if err != nil {
		return 0, 0, err
	}
	var n, first int64
	firstSeen := false
	err = q.eachEntryLocked(no, func(e Entry, _ model.LogPos) bool {
		if e.BaseOffset >= to {
			return false
		}
		if !firstSeen {
			first, firstSeen = e.MaxTime, true
		}
		n += int64(e.Size)
		return true
	})
	return n, first, err
}
