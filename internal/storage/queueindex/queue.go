package queueindex

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/rosettamq/rosetta/internal/model"
)

// Store holds the index files of all queues under one directory.
type Store struct {
	dir       string
	perFile   int64
	fds       *fdCache
	segmentOf func(model.LogPos) model.LogPos
}

// SetSegmentOf tells the store how to map a log position to the base of
// its segment (for accounting of entries read back from the files). Set it
// before entries are dropped or recounted.
func (s *Store) SetSegmentOf(fn func(model.LogPos) model.LogPos) { s.segmentOf = fn }

// NewStore returns a store rooted at dir whose files hold perFile entries
// each, with at most maxOpen files open at once.
func NewStore(dir string, perFile int64, maxOpen int) (*Store, error) {
	if perFile <= 0 || maxOpen <= 0 {
		return nil, fmt.Errorf("%w: index file capacity %d, open files %d", model.ErrInvalidConfig, perFile, maxOpen)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create index dir: %w", err)
	}
	return &Store{dir: dir, perFile: perFile, fds: newFDCache(maxOpen)}, nil
}

// Close closes every open file.
func (s *Store) Close() { s.fds.closeAll() }

// OpenFiles returns the number of index files currently open.
func (s *Store) OpenFiles() int { return s.fds.open() }

// State is the durable summary of a queue kept in the engine's checkpoint.
type State struct {
	First   int64             // number of the first retained entry
	Flushed int64             // entries [First, Flushed) are in the files
	Next    model.QueueOffset // next offset to assign
	Start   model.QueueOffset // first readable offset
	MaxTime int64             // running maximum timestamp
}

// Queue is the index of one queue. Append is called by the single log writer;
// lookups may run concurrently with it and with Flush.
type Queue struct {
	id    model.QueueID
	store *Store

	fmu sync.Mutex // serialises Flush, file removal and in-place changes

	mu      sync.Mutex
	first   int64
	flushed int64
	tail    []Entry // entries [flushed, flushed+len(tail))
	next    model.QueueOffset
	start   model.QueueOffset
	maxTime int64
	hintNo  int64 // entry number after the last one read, to skip searches
	deleted bool
	bytes   SegmentBytes // live bytes of the retained entries, by segment
	total   int64
	// filesFirst: index files before this entry number are deleted.
	filesFirst int64
	loc        locateAhead // entry lookups in offset order (relocation, compaction)
	// firstBase caches the base offset of entry firstBaseNo (a dense guess's
	// starting point); -1: none.
	firstBaseNo int64
	firstBase   model.QueueOffset
}

// Open returns the index of queue id with the given checkpointed state and
// the live bytes of its entries (nil: none counted; see RebuildBytes).
func (s *Store) Open(id model.QueueID, st State, bytes SegmentBytes) *Queue {
	if bytes == nil {
		bytes = SegmentBytes{}
	}
	return &Queue{id: id, store: s, first: st.First, flushed: st.Flushed, next: st.Next, start: st.Start, maxTime: st.MaxTime, hintNo: -1, firstBaseNo: -1,
		bytes: bytes, total: bytes.Total(), filesFirst: st.First}
}

// ID is the queue's id.
func (q *Queue) ID() model.QueueID { return q.id }

// State returns the queue's summary as of the last Flush.
func (q *Queue) State() State {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stateLocked()
}

func (q *Queue) stateLocked() State {
	next, maxTime := q.next, q.maxTime
	if len(q.tail) > 0 {
		// Only flushed entries are durable in the files.
		next = q.tail[0].BaseOffset
		if q.flushed > q.first {
			if e, err := q.readEntryLocked(q.flushed - 1); err == nil {
				maxTime = e.MaxTime
			}
		} else {
			maxTime = 0
		}
	}
	return State{First: q.first, Flushed: q.flushed, Next: next, Start: q.start, MaxTime: maxTime}
}

// NextOffset is the offset the next message gets (the log end offset).
func (q *Queue) NextOffset() model.QueueOffset {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.next
}

// MaxTime is the largest timestamp appended so far.
func (q *Queue) MaxTime() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.maxTime
}

// StartOffset is the first readable offset.
func (q *Queue) StartOffset() model.QueueOffset {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.start
}

// Append adds an entry at the end; e.BaseOffset must equal NextOffset. It
// returns the number of unflushed entries.
func (q *Queue) Append(e Entry) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.MaxTime < q.maxTime {
		e.MaxTime = q.maxTime
	}
	q.maxTime = e.MaxTime
	q.tail = append(q.tail, e)
	q.next = e.End()
	q.countLocked(e.Segment, int64(e.Size))
	return len(q.tail)
}

func (q *Queue) dir() string { return filepath.Join(q.store.dir, fmt.Sprint(uint32(q.id))) }

func (q *Queue) filePath(fileFirst int64) string {
	return filepath.Join(q.dir(), fmt.Sprintf("%020d.idx", fileFirst))
}

// Flush writes the in-memory entries to the index files. It does not fsync.
func (q *Queue) Flush() error {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	q.mu.Lock()
	if q.deleted || len(q.tail) == 0 {
		q.mu.Unlock()
		return nil
	}
	n := len(q.tail)
	from := q.flushed
	buf := make([]byte, n*EntrySize)
	for i, e := range q.tail[:n] {
		e.Encode(buf[i*EntrySize:])
	}
	q.mu.Unlock()

	if err := q.writeEntries(from, buf); err != nil {
		return err
	}

	q.mu.Lock()
	rest := copy(q.tail, q.tail[n:])
	q.tail = q.tail[:rest]
	if rest == 0 && (n < hotQueueEntries || cap(q.tail) > 4*hotQueueEntries) {
		q.tail = nil // a quiet queue gives its buffer back
	}
	q.flushed += int64(n)
	q.mu.Unlock()
	return nil
}

// hotQueueEntries is the flush size above which a queue keeps its tail
// buffer between flushes.
const hotQueueEntries = 64

// TailLen is the number of entries not yet written to the files.
func (q *Queue) TailLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.tail)
}

// eachFileChunk splits the entries [no, no+len(b)/EntrySize) by index file
// and calls fn with each file's first entry number, the chunk's first entry
// number and the chunk's bytes.
func (q *Queue) eachFileChunk(no int64, b []byte, fn func(fileFirst, no int64, chunk []byte) error) error {
	per := q.store.perFile
	for len(b) > 0 {
		fileFirst := no / per * per
		room := (fileFirst + per - no) * EntrySize
		chunk := b[:min(int64(len(b)), room)]
		if err := fn(fileFirst, no, chunk); err != nil {
			return err
		}
		no += int64(len(chunk)) / EntrySize
		b = b[len(chunk):]
	}
	return nil
}

func (q *Queue) writeEntries(from int64, buf []byte) error {
	return q.eachFileChunk(from, buf, q.writeFile)
}

func (q *Queue) writeFile(fileFirst, from int64, chunk []byte) error {
	path := q.filePath(fileFirst)
	cf, err := q.store.fds.get(path, false)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(q.dir(), 0o755); err != nil {
			return fmt.Errorf("create queue index dir: %w", err)
		}
		cf, err = q.store.fds.get(path, true)
		if err == nil {
			_, err = cf.f.WriteAt(encodeFileHeader(q.id), 0)
			if err != nil {
				q.store.fds.put(cf)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("open index file: %w", err)
	}
	defer q.store.fds.put(cf)
	if _, err := cf.f.WriteAt(chunk, FileHeaderSize+(from-fileFirst)*EntrySize); err != nil {
		return fmt.Errorf("write index: %w", err)
	}
	return nil
}

// Sync fsyncs the queue's newest index file (the only one written since the
// previous checkpoint unless a file boundary was crossed).
func (q *Queue) Sync() error {
	q.mu.Lock()
	flushed := q.flushed
	q.mu.Unlock()
	if flushed == 0 {
		return nil
	}
	per := q.store.perFile
	last := (flushed - 1) / per * per
	for _, ff := range []int64{last - per, last} {
		if ff < 0 {
			continue
		}
		cf, err := q.store.fds.get(q.filePath(ff), false)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = cf.f.Sync()
		q.store.fds.put(cf)
		if err != nil {
			return fmt.Errorf("sync index: %w", err)
		}
	}
	return nil
}

// readEntryLocked reads entry number no from the tail or the files.
func (q *Queue) readEntryLocked(no int64) (Entry, error) {
	if no >= q.flushed {
		i := no - q.flushed
		if i < int64(len(q.tail)) {
			return q.tail[i], nil
		}
		return Entry{}, io.EOF
	}
	var b [EntrySize]byte
	if err := q.readFileEntries(no, b[:]); err != nil {
		return Entry{}, err
	}
	return DecodeEntry(b[:])
}

func (q *Queue) readFileEntries(no int64, dst []byte) error {
	return q.eachFileChunk(no, dst, func(fileFirst, no int64, chunk []byte) error {
		cf, err := q.store.fds.get(q.filePath(fileFirst), false)
		if err != nil {
			return fmt.Errorf("open index file: %w", err)
		}
		_, err = cf.f.ReadAt(chunk, FileHeaderSize+(no-fileFirst)*EntrySize)
		q.store.fds.put(cf)
		if err != nil {
			return fmt.Errorf("read index: %w", err)
		}
		return nil
	})
}

// total is the number past the last entry.
func (q *Queue) totalLocked() int64 { return q.flushed + int64(len(q.tail)) }

// Lookup finds the entry holding offset and returns its number.
func (q *Queue) Lookup(offset model.QueueOffset) (int64, Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if offset < q.start || offset >= q.next {
		return 0, Entry{}, fmt.Errorf("%w: offset %d not in [%d, %d)", model.ErrOffsetOutOfRange, offset, q.start, q.next)
	}
	if n := len(q.tail); n > 0 && offset >= q.tail[0].BaseOffset {
		i := sort.Search(n, func(i int) bool { return q.tail[i].End() > offset })
		return q.flushed + int64(i), q.tail[i], nil
	}
	if q.hintNo >= q.first && q.hintNo < q.totalLocked() {
		if e, err := q.readEntryLocked(q.hintNo); err == nil && e.BaseOffset <= offset && offset < e.End() {
			return q.hintNo, e, nil
		}
	}
	if no, e, ok := q.guessDenseLocked(offset); ok {
		return no, e, nil
	}
	return q.searchLocked(func(e Entry) bool { return e.End() > offset })
}

// guessDenseLocked tries the entry offset would have if every entry from
// the first held one offset (RocketMQ queues, Kafka topics of single
// records): one read instead of a search.
func (q *Queue) guessDenseLocked(offset model.QueueOffset) (int64, Entry, bool) {
	if q.firstBaseNo != q.first || q.first >= q.totalLocked() {
		first, err := q.readEntryLocked(q.first)
		if err != nil {
			return 0, Entry{}, false
		}
		q.firstBaseNo, q.firstBase = q.first, first.BaseOffset
	}
	if offset < q.firstBase {
		return 0, Entry{}, false
	}
	no := q.first + int64(offset-q.firstBase)
	if no >= q.totalLocked() {
		return 0, Entry{}, false
	}
	e, err := q.readEntryLocked(no)
	if err != nil || e.BaseOffset > offset || offset >= e.End() {
		return 0, Entry{}, false
	}
	return no, e, true
}

// searchLocked returns the first entry for which pred holds (pred must be
// monotonic over entry numbers).
func (q *Queue) searchLocked(pred func(Entry) bool) (int64, Entry, error) {
	lo, hi := q.first, q.totalLocked()
	var ioErr error
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := q.readEntryLocked(mid)
		if err != nil {
			ioErr = err
			break
		}
		if pred(e) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if ioErr != nil {
		return 0, Entry{}, ioErr
	}
	if lo >= q.totalLocked() {
		return 0, Entry{}, fmt.Errorf("%w: no such entry", model.ErrOffsetOutOfRange)
	}
	e, err := q.readEntryLocked(lo)
	return lo, e, err
}

// LookupTime returns the first entry holding a timestamp >= ts.
func (q *Queue) LookupTime(ts int64) (int64, Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.searchLocked(func(e Entry) bool { return e.MaxTime >= ts })
}

// LookupPos returns the first entry at or after log position pos.
func (q *Queue) LookupPos(pos model.LogPos) (int64, Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.searchLocked(func(e Entry) bool { return e.Pos >= pos })
}

// Entries appends up to max consecutive entries starting at number no to dst.
func (q *Queue) Entries(no int64, max int, dst []Entry) ([]Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if no < q.first {
		return dst, fmt.Errorf("%w: entry %d before first %d", model.ErrOffsetOutOfRange, no, q.first)
	}
	if no < q.flushed && max > 0 {
		n := min(int64(max), q.flushed-no)
		buf := make([]byte, n*EntrySize)
		if err := q.readFileEntries(no, buf); err != nil {
			return dst, err
		}
		for i := int64(0); i < n; i++ {
			e, err := DecodeEntry(buf[i*EntrySize:])
			if err != nil {
				return dst, err
			}
			dst = append(dst, e)
		}
		no += n
		max -= int(n)
	}
	for i := no - q.flushed; max > 0 && i >= 0 && i < int64(len(q.tail)); i++ {
		dst = append(dst, q.tail[i])
		no++
		max--
	}
	q.hintNo = no
	return dst, nil
}

// First returns the first retained entry, if any.
func (q *Queue) First() (Entry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.first >= q.totalLocked() {
		return Entry{}, false
	}
	e, err := q.readEntryLocked(q.first)
	return e, err == nil
}

// SetStart moves the first readable offset forward (retention, DeleteRecords)
// and forgets entries wholly before it. Files no longer needed are deleted.
func (q *Queue) SetStart(offset model.QueueOffset) error {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	q.mu.Lock()
	if offset <= q.start {
		q.mu.Unlock()
		return nil
	}
	if offset > q.next {
		offset = q.next
	}
	q.start = offset
	first := q.totalLocked()
	if offset < q.next {
		no, _, err := q.searchLocked(func(e Entry) bool { return e.End() > offset })
		if err != nil {
			q.mu.Unlock()
			return err
		}
		first = no
	}
	if err := q.dropLocked(q.first, first); err != nil {
		q.mu.Unlock()
		return err
	}
	q.first = first
	q.mu.Unlock()
	return nil
}

// ReleaseFiles deletes the index files wholly before entry number upTo,
// which a checkpoint has recorded as the queue's first entry (deleting
// them when the start moves would leave a crash that falls back on an
// older checkpoint without entries it still names).
func (q *Queue) ReleaseFiles(upTo int64) error {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	q.mu.Lock()
	from, flushed, deleted := q.filesFirst, q.flushed, q.deleted
	upTo = min(upTo, q.first)
	if upTo > from {
		q.filesFirst = upTo
	}
	q.mu.Unlock()
	if deleted {
		return nil
	}
	per := q.store.perFile
	for ff := from / per * per; ff+per <= upTo && ff+per <= flushed; ff += per {
		path := q.filePath(ff)
		q.store.fds.forget(path)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("delete index file: %w", err)
		}
	}
	return nil
}

// TruncateFromPos drops the entries of records written at or after log
// position pos (the log lost them) and returns how many it dropped. Those
// are the newest entries: entries moved to copies or compacted rewrites
// point elsewhere but hold older offsets, so the walk goes back from the
// tail while entries point into the commit log at or after pos.
func (q *Queue) TruncateFromPos(pos model.LogPos) (int64, error) {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	no, err := q.tailWhileLocked(func(e Entry) bool { return !e.Hole() && e.Pos >= pos && !e.Pos.IsLocal() })
	if err != nil {
		return 0, err
	}
	return q.truncateLocked(no)
}

// tailWhileLocked returns the first entry number of the longest run of
// entries at the tail for which keep holds.
func (q *Queue) tailWhileLocked(keep func(Entry) bool) (int64, error) {
	no := q.totalLocked()
	for no > q.first {
		e, err := q.readEntryLocked(no - 1)
		if err != nil {
			return 0, err
		}
		if !keep(e) {
			break
		}
		no--
	}
	return no, nil
}

// TruncateFromOffset drops every entry holding offset off or later (the
// records that assigned them were cut from the log) and returns how many
// it dropped. The next offset becomes off.
func (q *Queue) TruncateFromOffset(off model.QueueOffset) (int64, error) {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if off >= q.next {
		return 0, nil
	}
	no, err := q.tailWhileLocked(func(e Entry) bool { return e.BaseOffset >= off })
	if err != nil {
		return 0, err
	}
	n, err := q.truncateLocked(no)
	if err == nil && q.next > off {
		q.next = off
		q.start = min(q.start, off)
	}
	return n, err
}

// truncateLocked drops entries [no, total) and makes the next offset the
// first dropped entry's base.
func (q *Queue) truncateLocked(no int64) (int64, error) {
	total := q.totalLocked()
	if no >= total {
		return 0, nil
	}
	e, err := q.readEntryLocked(no)
	if err != nil {
		return 0, err
	}
	if err := q.dropLocked(no, total); err != nil {
		return 0, err
	}
	q.next = e.BaseOffset
	if no >= q.flushed {
		q.tail = q.tail[:no-q.flushed]
	} else {
		q.tail = nil
		q.flushed = no
	}
	if q.start > q.next {
		q.start = q.next
	}
	q.maxTime = 0
	if no > q.first {
		if prev, err := q.readEntryLocked(no - 1); err == nil {
			q.maxTime = prev.MaxTime
		}
	}
	q.hintNo = -1
	q.loc = locateAhead{}
	q.firstBaseNo = -1
	return total - no, nil
}

// Delete removes the queue's files. The queue must not be used afterwards.
func (q *Queue) Delete() error {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	q.mu.Lock()
	q.deleted = true
	q.tail = nil
	q.bytes, q.total = SegmentBytes{}, 0
	first, flushed := q.first, q.flushed
	q.mu.Unlock()
	per := q.store.perFile
	for ff := first / per * per; ff < flushed; ff += per {
		q.store.fds.forget(q.filePath(ff))
	}
	if err := os.RemoveAll(q.dir()); err != nil {
		return fmt.Errorf("delete queue index: %w", err)
	}
	return nil
}

// Assign appends the entry for a new record of count messages at pos (in
// the segment based at seg) and returns the base offset it was given and
// the number of unflushed entries.
func (q *Queue) Assign(pos, seg model.LogPos, size, count uint32, ts int64, tagHash uint64) (model.QueueOffset, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	base := q.next
	if ts < q.maxTime {
		ts = q.maxTime
	}
	q.maxTime = ts
	q.tail = append(q.tail, Entry{Pos: pos, BaseOffset: base, Size: size, Count: count, MaxTime: ts, TagHash: tagHash, Segment: seg})
	q.next = base + model.QueueOffset(count)
	q.countLocked(seg, int64(size))
	return base, len(q.tail)
}

// VisibleEnd returns the offset after the newest entry whose record ends at
// or before the log position visible: the queue's high watermark.
func (q *Queue) VisibleEnd(visible model.LogPos) model.QueueOffset {
	q.mu.Lock()
	defer q.mu.Unlock()
	total := q.totalLocked()
	for no := total - 1; no >= q.first; no-- {
		e, err := q.readEntryLocked(no)
		if err != nil {
			break
		}
		// Local-area copies are made durable before an entry points at
		// them, and only of records already visible.
		if e.Pos.IsLocal() || e.Pos+model.LogPos(e.Size) <= visible {
			return max(e.End(), q.start)
		}
	}
	if total > q.first {
		if e, err := q.readEntryLocked(q.first); err == nil {
			return max(e.BaseOffset, q.start)
		}
	}
	return q.next
}

// SetNext moves the next offset forward over a gap (recovery only).
func (q *Queue) SetNext(next model.QueueOffset) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if next > q.next {
		q.next = next
		if q.totalLocked() == q.first {
			q.start = max(q.start, next)
		}
	}
}
