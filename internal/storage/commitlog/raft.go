package commitlog

// The surface a replication group needs from its log (go.etcd.io/raft's
// Storage): records by index, the term at an index, the retained index
// range, the index known durable, a term that grows, truncation by index.
// The log keeps no index → position table: a record is found from the
// first index of its segment (its first record's) and a scan within it,
// remembering where the last lookup ended so sequential reads do not scan
// again. Indexes must be monotonic across segments, which they are in logs
// written by this version (older versions restarted them at 1 on every
// clean start; such logs are read, but not served by index).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/rosettamq/rosetta/internal/model"
)

// ErrCompacted is a request for records no longer in the log (below its
// first index, or in a deleted segment).
var ErrCompacted = errors.New("requested index is no longer in the log")

// IndexedEntry is one record's bytes as stored (header and all), with its
// index and term. Data is a copy.
type IndexedEntry struct {
	Index model.Index
	Term  model.Term
	Data  []byte
}

// cursor remembers where the last index lookup ended.
type cursor struct {
	index model.Index
	pos   model.LogPos
}

// firstIndexOf returns the index of a segment's first record (0 when it has
// none, or was deleted meanwhile: its mapping goes with its last
// reference, so the read holds one).
func firstIndexOf(s *segment) model.Index {
	if !s.acquire() {
		return 0
	}
	defer s.release()
	used := s.used.Load()
	if used == 0 {
		return 0
	}
	h, err := DecodeHeader(s.data[:used])
	if err != nil {
		return 0
	}
	return h.Index
}

// FirstIndex returns the index of the first record of the contiguous
// range the log serves by index (0 when the log holds none): segments
// deleted in the middle of the log (reclaimed once nothing retained them)
// end the range, so [FirstIndex, LastIndex] never has a gap. Records before
// a gap stay readable by position; a replica that needs them gets a
// snapshot instead.
func (l *Log) FirstIndex() model.Index {
	segs := l.segments()
	first := model.Index(0)
	for i := len(segs) - 1; i >= 0; i-- {
		if i < len(segs)-1 && segs[i].end() != segs[i+1].base {
			break
		}
		if idx := firstIndexOf(segs[i]); idx != 0 {
			first = idx
		}
	}
	return first
}

// LastIndex returns the index of the newest record written (0 when none).
func (l *Log) LastIndex() model.Index {
	return l.NextIndex() - 1
}

// SyncedIndex returns the index of the newest record known durable.
func (l *Log) SyncedIndex() model.Index { return model.Index(l.syncedIndex.Load()) }

// SetTerm makes later appends carry term t; terms only grow.
func (l *Log) SetTerm(t model.Term) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := model.Term(l.term.Load()); t < cur {
		return fmt.Errorf("%w: term %d below the current %d", model.ErrInvalidConfig, t, cur)
	}
	l.term.Store(uint64(t))
	return nil
}

// locate returns the position of the record with index i.
func (l *Log) locate(i model.Index) (model.LogPos, error) {
	if i == 0 || i >= l.NextIndex() {
		return 0, fmt.Errorf("%w: index %d not written", model.ErrOffsetOutOfRange, i)
	}
	if l.opts.Mode == SyncAlways && uint64(i) > l.syncedIndex.Load() {
		// Sync mode may hold the newest records for the syncer to write;
		// lookups read the file mapping.
		if err := l.FlushPending(); err != nil {
			return 0, err
		}
	}
	if pos, ok := l.recentPos(i); ok {
		return pos, nil
	}
	segs := l.segments()
	firsts := make([]model.Index, len(segs))
	for j, s := range segs {
		firsts[j] = firstIndexOf(s)
	}
	// The last segment whose first index is at or below i.
	j := sort.Search(len(segs), func(j int) bool { return firsts[j] != 0 && firsts[j] > i }) - 1
	for j >= 0 && firsts[j] == 0 {
		j--
	}
	if j < 0 {
		return 0, fmt.Errorf("%w: index %d", ErrCompacted, i)
	}
	s := segs[j]
	if !s.acquire() { // deleted meanwhile
		return 0, fmt.Errorf("%w: index %d", ErrCompacted, i)
	}
	defer s.release()
	off := int64(0)
	l.cursorMu.Lock()
	c := l.cursor
	l.cursorMu.Unlock()
	if c.index != 0 && c.index <= i && c.pos >= s.base && int64(c.pos-s.base) < s.used.Load() {
		if h, err := DecodeHeader(s.data[c.pos-s.base : s.used.Load()]); err == nil && h.Index == c.index {
			off = int64(c.pos - s.base)
		}
	}
	used := s.used.Load()
	for off < used {
		h, err := DecodeHeader(s.data[off:used])
		if err != nil {
			break
		}
		if h.Index == i {
			pos := s.base + model.LogPos(off)
			l.cursorMu.Lock()
			l.cursor = cursor{index: i, pos: pos}
			l.cursorMu.Unlock()
			return pos, nil
		}
		if h.Index > i {
			break
		}
		off += int64(h.Length)
	}
	return 0, fmt.Errorf("%w: index %d", ErrCompacted, i)
}

// Entries returns the records with indexes in [lo, hi), at most maxBytes of
// them (always at least one when lo is in the log).
func (l *Log) Entries(lo, hi model.Index, maxBytes int) ([]IndexedEntry, error) {
	if lo >= hi {
		return nil, nil
	}
	pos, err := l.locate(lo)
	if err != nil {
		return nil, err
	}
	var out []IndexedEntry
	size := 0
	for i := lo; i < hi; i++ {
		r, v, err := l.ReadRecord(pos)
		if err != nil {
			if len(out) > 0 {
				break // the end of a segment: the caller asks again from here
			}
			return nil, err
		}
		if r.Index != i {
			v.Release()
			if len(out) > 0 {
				break
			}
			return nil, fmt.Errorf("%w: index %d found %d at %d", model.ErrCorruptRecord, i, r.Index, pos)
		}
		n := int(r.Length)
		if len(out) > 0 && size+n > maxBytes {
			v.Release()
			break
		}
		data := append([]byte(nil), v.s.data[pos-v.s.base:pos-v.s.base+model.LogPos(n)]...)
		v.Release()
		out = append(out, IndexedEntry{Index: i, Term: r.Term, Data: data})
		size += n
		pos += model.LogPos(n)
		if next, err := l.locateAfter(pos, i+1); err == nil {
			pos = next
		} else {
			break
		}
	}
	return out, nil
}

// locateAfter returns where the record after one ending at pos lies: at pos,
// or at the start of the next segment when pos ends a segment.
func (l *Log) locateAfter(pos model.LogPos, i model.Index) (model.LogPos, error) {
	if i >= l.NextIndex() {
		return 0, model.ErrOffsetOutOfRange
	}
	for _, s := range l.segments() {
		if pos >= s.base && int64(pos-s.base) < s.used.Load() {
			return pos, nil
		}
	}
	return l.locate(i)
}

// Term returns the term of the record with index i.
func (l *Log) Term(i model.Index) (model.Term, error) {
	pos, err := l.locate(i)
	if err != nil {
		return 0, err
	}
	// The header alone: Raft asks for terms with every append it sends or
	// takes, and checksumming a whole record (up to a MiB) for its term
	// cost followers more than storing it. Records are checked when written,
	// recovered and read for clients.
	v, err := l.Acquire(pos)
	if err != nil {
		return 0, err
	}
	defer v.Release()
	off := int64(pos - v.s.base)
	used := v.s.used.Load()
	if off >= used {
		return 0, fmt.Errorf("%w: position %d past segment data", model.ErrOffsetOutOfRange, pos)
	}
	h, err := DecodeHeader(v.s.data[off:used])
	if err != nil {
		return 0, err
	}
	if h.Index != i {
		return 0, fmt.Errorf("%w: record at the position of index %d holds index %d", model.ErrCorruptRecord, i, h.Index)
	}
	return h.Term, nil
}

// TruncateAfter drops every record with an index above i (a follower's
// divergent tail). What was derived from those records is the caller's to
// roll back.
func (l *Log) TruncateAfter(i model.Index) error {
	if i+1 >= l.NextIndex() {
		return nil
	}
	pos, err := l.locate(i + 1)
	if err != nil {
		return err
	}
	_, err = l.TruncateTo(pos)
	return err
}

// PositionOf returns the position of the record with index i.
func (l *Log) PositionOf(i model.Index) (model.LogPos, error) { return l.locate(i) }

// Scan calls fn for every record from pos (a record boundary) to the end
// of the written data, in order, stepping over gaps; an error from fn ends
// the scan and is returned. Payloads alias the log and are valid only
// during the call.
func (l *Log) Scan(pos model.LogPos, fn func(pos model.LogPos, r *Record) error) error {
	for _, s := range l.segments() {
		if !s.acquire() {
			continue
		}
		used := s.used.Load()
		if s.base+model.LogPos(used) <= pos {
			s.release()
			continue
		}
		off := int64(0)
		if pos > s.base {
			off = int64(pos - s.base)
		}
		for off < used {
			r, err := Decode(s.data[off:used])
			if err != nil {
				s.release()
				return err
			}
			at := s.base + model.LogPos(off)
			r.Pos, r.Segment = at, s.base
			if err := fn(at, &r); err != nil {
				s.release()
				return err
			}
			off += int64(r.Length)
		}
		s.release()
	}
	return nil
}

// EndOf returns the end of the record with index i (its position plus its
// length), reading only its length.
func (l *Log) EndOf(i model.Index) (model.LogPos, error) {
	pos, err := l.locate(i)
	if err != nil {
		return 0, err
	}
	v, err := l.Acquire(pos)
	if err != nil {
		return 0, err
	}
	defer v.Release()
	b, ok := v.Bytes(pos, 4)
	if !ok {
		return 0, fmt.Errorf("%w: record %d at %d", model.ErrCorruptRecord, i, pos)
	}
	n := binary.LittleEndian.Uint32(b)
	if n < HeaderSize {
		return 0, fmt.Errorf("%w: record %d at %d has length %d", model.ErrCorruptRecord, i, pos, n)
	}
	return pos + model.LogPos(n), nil
}

// FlushPending writes what sync mode holds for the syncer now, so reads
// through the mapping see every record written. A sync in progress has
// taken its pending bytes and writes them before its fsync: wait for it.
func (l *Log) FlushPending() error {
	l.syncRun.Lock()
	defer l.syncRun.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flushPendingLocked()
}

// recentMask sizes the table of recent record positions a replicated log
// keeps (64 Ki records): the lookups a replication group makes — commit,
// terms of what it just stored, entries for followers close behind — find
// their record there instead of scanning a segment.
const recentMask = 1<<16 - 1

// recentPos returns the position of record i from the recent table,
// checked against the record there.
func (l *Log) recentPos(i model.Index) (model.LogPos, bool) {
	if l.recent == nil {
		return 0, false
	}
	l.cursorMu.Lock()
	c := l.recent[i&recentMask]
	l.cursorMu.Unlock()
	if c.index != i {
		return 0, false
	}
	for _, s := range l.segments() {
		used := s.used.Load()
		if c.pos < s.base || int64(c.pos-s.base) >= used || !s.acquire() {
			continue
		}
		h, err := DecodeHeader(s.data[c.pos-s.base : used])
		s.release()
		return c.pos, err == nil && h.Index == i
	}
	return 0, false
}
