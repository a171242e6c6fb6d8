package commitlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
)

// SyncMode is the durability policy of a log.
type SyncMode int

const (
	// SyncAsync acknowledges appends once they are in the page cache and
	// syncs every FlushInterval.
	SyncAsync SyncMode = iota
	// SyncAlways acknowledges an append only after fsync; concurrent appends
	// share one fsync.
	SyncAlways
)

// Options configures a Log.
type Options struct {
	Dir           string
	SegmentSize   int64
	Mode          SyncMode
	FlushInterval time.Duration // async mode; sync mode: the bound on deferred appends
	Term          model.Term
	Logger        *slog.Logger
	Now           func() time.Time
	// BeforeRoll is asked before a new segment is created; an error refuses
	// the append (the disk guard plugs in here).
	BeforeRoll func() error
	// OnVisible is called, outside any lock, when the visible end advances.
	OnVisible func(end model.LogPos)
	// OnSynced is called after each fsync with the position and the record
	// index synced and the time it took.
	OnSynced func(end model.LogPos, index model.Index, took time.Duration)
	// Faults, when set, injects I/O errors (tests).
	Faults *Faults
	// ForeignIndexes: records keep the index and term their Assigner
	// gives them (a local area's copies carry their origin there), and
	// recovery does not check that indexes follow one another.
	ForeignIndexes bool
	// Replicated makes the log a replication group's: Append and
	// AppendDeferred are refused (ErrNotWritable) unless SetWritable opened
	// the log for writing (this node leads the group), and while it is open
	// OnWritten receives, under the append lock and in index order, the
	// bytes of every record they write (one or more whole records per
	// call, in pieces: size bytes in all), for the group to propose; the
	// pieces are the log's and valid only during the call. AppendReplica
	// writes a leader's records on any node, and hands nothing off.
	Replicated bool
	OnWritten  func(records [][]byte, size int64)
}

// ErrNotWritable refuses an append to a replicated log this node does not
// lead.
var ErrNotWritable = errors.New("log is not writable here: this node does not lead its group")

// Flags in a record header.
const (
	// FlagControl marks a storage control record (queue create/delete). It
	// belongs to no queue index.
	FlagControl uint16 = 1 << 15
	// FlagPayloadOffset says the payload begins with its own base offset as
	// a big-endian int64 (a Kafka record batch): the log writes the
	// assigned base offset there and, in a payload of 16 bytes or more,
	// the leader epoch of the record's term as a big-endian int32 at bytes
	// 12..16 (a batch's partitionLeaderEpoch).
	FlagPayloadOffset uint16 = 1 << 14
	// FlagRelocated marks a copy of an earlier record made by garbage
	// collection (same queue, offsets, timestamps, keys and payload): the
	// queue index points at the copy from then on, and recovery replaying
	// it moves the entry rather than adding one.
	FlagRelocated uint16 = 1 << 13
	// FlagCompacted (with FlagRelocated) marks a compacted rewrite of an
	// earlier record: same queue, base offset and count, some of its
	// messages left out.
	FlagCompacted uint16 = 1 << 12
)

// Entry is one record to append. The log fills Pos, Size and Index; the
// Assigner fills BaseOffset.
type Entry struct {
	Format     model.PayloadFormat
	Flags      uint16
	Queue      model.QueueID
	BaseOffset model.QueueOffset
	Count      uint32
	Timestamp  int64
	StoreTime  int64
	TagHash    uint64
	Keys       []Key
	Payload    []byte
	// PayloadTailFrom and PayloadTailCRC: when the caller has verified the
	// CRC-32C of Payload[PayloadTailFrom:] (Kafka batches carry one), the
	// log combines it into the record checksum instead of reading those
	// bytes again.
	PayloadTailFrom int
	PayloadTailCRC  uint32

	Pos     model.LogPos
	Segment model.LogPos // base of the segment Pos lies in
	Size    uint32
	Index   model.Index
	Term    model.Term // the term the entry is written in (set before Assign)
}

// Assigner is called under the log's append lock, in log order, once the
// entry's position and index are known and before it is written. It assigns
// queue offsets and records index entries, so offsets are assigned in exactly
// one place.
type Assigner interface {
	Assign(e *Entry)
	// Done is called under the append lock after the last Assign of a call
	// and before its final bytes are published.
	Done()
}

// Recovery says where a scan of the tail starts: a record boundary below
// which indexes are known to be complete, and the index of the record there.
type Recovery struct {
	Pos       model.LogPos
	NextIndex model.Index
}

// Log is a commit log. Appends are serialised; reads are lock-free.
type Log struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex // serialises appends, rolls and truncation
	active    *segment
	nextIndex model.Index
	batch     batchWriter  // reused by each append (under mu)
	pend      pendingWrite // sync mode: published bytes the syncer writes
	spare     []byte       // a pending buffer to reuse
	failed    error        // sticky write or fsync error
	closed    bool

	failedErr atomic.Pointer[error] // failed, readable without mu
	crashed   atomic.Bool           // PowerLoss: no final sync

	writable    bool          // Replicated: appends accepted (under mu)
	writableNow atomic.Bool   // writable, readable without mu
	term        atomic.Uint64 // the term appends are written in (SetTerm)
	syncedIndex atomic.Uint64 // index of the newest fsynced record
	cursorMu    sync.Mutex
	cursor      cursor   // where the last index lookup ended (raft.go)
	recent      []cursor // Replicated: positions of recent records by index (raft.go)

	segs    atomic.Pointer[[]*segment] // immutable, replaced on change
	written atomic.Int64               // end of written data
	synced  atomic.Int64               // end of fsynced data

	syncRun sync.Mutex // serialises syncOnce
	syncMu  sync.Mutex
	syncGen chan struct{} // closed and replaced after each sync
	kick    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// Open opens or creates the log in opts.Dir, scans the tail from rec.Pos,
// calls visit for every valid record found, truncates a torn or corrupt tail,
// and starts the syncer.
func Open(opts Options, rec Recovery, visit func(pos model.LogPos, r *Record) error) (*Log, error) {
	if opts.SegmentSize < HeaderSize*2 {
		return nil, fmt.Errorf("%w: segment size %d", model.ErrInvalidConfig, opts.SegmentSize)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Term == 0 {
		opts.Term = 1
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = time.Second
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	l := &Log{
		opts:    opts,
		log:     opts.Logger.With("component", "commitlog"),
		syncGen: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	l.term.Store(uint64(opts.Term))
	if opts.Replicated {
		l.recent = make([]cursor, recentMask+1)
	}
	if err := l.recover(rec, visit); err != nil {
		l.closeSegments()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.syncLoop(ctx)
	return l, nil
}

func (l *Log) segments() []*segment { return *l.segs.Load() }

func (l *Log) setSegments(s []*segment) { l.segs.Store(&s) }

// CurrentTerm returns the term appended records are written in.
func (l *Log) CurrentTerm() model.Term { return model.Term(l.term.Load()) }

// NextIndex returns the index the next appended record gets.
func (l *Log) NextIndex() model.Index {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextIndex
}

// Start is the position of the oldest byte still stored.
func (l *Log) Start() model.LogPos { return l.segments()[0].base }

// End is the end of the written data.
func (l *Log) End() model.LogPos { return model.LogPos(l.written.Load()) }

// Tail returns the written end and the index the next record gets, read
// together (a checkpoint's recovery point).
func (l *Log) Tail() (model.LogPos, model.Index) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return model.LogPos(l.written.Load()), l.nextIndex
}

// Synced is the end of the data known to be on disk.
func (l *Log) Synced() model.LogPos { return model.LogPos(l.synced.Load()) }

// Visible is the end of what readers may see: the synced end in sync mode,
// the written end otherwise. On a single node it is the high watermark.
func (l *Log) Visible() model.LogPos {
	if l.opts.Mode == SyncAlways {
		return l.Synced()
	}
	return l.End()
}

// SegmentCount returns the number of segment files.
func (l *Log) SegmentCount() int { return len(l.segments()) }

// Size returns the bytes stored.
func (l *Log) Size() int64 {
	var n int64
	for _, s := range l.segments() {
		n += int64(s.end() - s.base)
	}
	return n
}

// Append writes entries in order and returns the end position of the last
// one. It does not wait for durability; call WaitSynced for that.
func (l *Log) Append(entries []*Entry, a Assigner) (model.LogPos, error) {
	return l.append(entries, a, true, false)
}

// AppendReplica appends another log's records (a replication group's
// entries, index and term set by the Assigner's log), whether or not the
// log is writable, handing nothing off.
func (l *Log) AppendReplica(entries []*Entry, a Assigner) (model.LogPos, error) {
	return l.append(entries, a, true, true)
}

// SetWritable opens (term > 0) or closes (term 0) a replicated log for
// Append: while open, appends carry the term and are handed to OnWritten.
// It returns the index of the last record written, the one the first
// append after opening follows.
func (l *Log) SetWritable(term model.Term) (model.Index, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if term > 0 {
		if cur := model.Term(l.term.Load()); term < cur {
			return 0, fmt.Errorf("%w: term %d below the current %d", model.ErrInvalidConfig, term, cur)
		}
		l.term.Store(uint64(term))
	}
	l.writable = term > 0
	l.writableNow.Store(l.writable)
	return l.nextIndex - 1, nil
}

// Writable reports whether a replicated log accepts appends.
func (l *Log) Writable() bool { return l.writableNow.Load() }

// AppendDeferred appends like Append but, in sync mode, asks for no fsync
// of its own: the entries become durable (and visible) with the next sync
// another append asks for, or at the latest one flush interval later.
func (l *Log) AppendDeferred(entries []*Entry, a Assigner) (model.LogPos, error) {
	return l.append(entries, a, false, false)
}

func (l *Log) append(entries []*Entry, a Assigner, kick, replica bool) (model.LogPos, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, model.ErrClosed
	}
	if l.failed != nil {
		l.mu.Unlock()
		return 0, l.failed
	}
	if l.opts.Replicated && !replica && !l.writable {
		l.mu.Unlock()
		return 0, ErrNotWritable
	}
	handOff := l.opts.Replicated && !replica && l.opts.OnWritten != nil
	if l.recent != nil {
		l.cursorMu.Lock()
		defer l.cursorMu.Unlock()
	}
	now := l.opts.Now().UnixMilli()
	var err error
	// Small records are encoded into a staging buffer; large payloads are
	// written straight from the caller's memory. One pwritev per segment
	// touched writes it all: cheaper per byte than faulting in mapped pages.
	// Readers see the records through the mapping once written advances.
	s := l.active
	w := &l.batch
	w.reset(s.used.Load())
	for _, e := range entries {
		n := Len(e.Keys, len(e.Payload))
		if int64(n) > l.opts.SegmentSize || n > 1<<31 {
			err = fmt.Errorf("%w: record of %d bytes exceeds segment size %d", model.ErrMessageTooLarge, n, l.opts.SegmentSize)
			break
		}
		if w.end()+int64(n) > int64(len(s.data)) {
			if handOff {
				l.handOff(w)
			}
			if err = l.commitBatch(s, w, !kick); err != nil {
				break
			}
			if err = l.rollLocked(); err != nil {
				break
			}
			s = l.active
			w.reset(0)
		}
		if e.StoreTime == 0 {
			e.StoreTime = now
		}
		if e.Timestamp == 0 {
			e.Timestamp = e.StoreTime
		}
		e.Pos = s.base + model.LogPos(w.end())
		e.Segment = s.base
		e.Size = uint32(n)
		e.Index = l.nextIndex
		e.Term = model.Term(l.term.Load())
		if l.recent != nil {
			l.recent[e.Index&recentMask] = cursor{index: e.Index, pos: e.Pos}
		}
		if a != nil {
			a.Assign(e)
		}
		h := Header{
			Format: e.Format, Flags: e.Flags, Queue: e.Queue, Term: e.Term, Index: e.Index,
			BaseOffset: e.BaseOffset, Count: e.Count, Timestamp: e.Timestamp, StoreTime: e.StoreTime, TagHash: e.TagHash,
			TailFrom: e.PayloadTailFrom, TailCRC: e.PayloadTailCRC,
		}
		w.add(&h, e.Keys, e.Payload, n)
		if e.StoreTime > s.lastTime.Load() {
			s.lastTime.Store(e.StoreTime)
		}
		l.nextIndex++
	}
	if a != nil {
		a.Done()
	}
	if handOff {
		l.handOff(w)
	}
	if werr := l.commitBatch(s, w, !kick); werr != nil && err == nil {
		err = werr
	}
	w.release()
	end := model.LogPos(l.written.Load())
	l.mu.Unlock()
	if l.opts.Mode == SyncAlways {
		if kick {
			select {
			case l.kick <- struct{}{}:
			default:
			}
		}
	} else if l.opts.OnVisible != nil {
		l.opts.OnVisible(end)
	}
	return end, err
}

// handOff gives OnWritten a batch's records (l.mu held).
func (l *Log) handOff(w *batchWriter) {
	if w.size == 0 {
		return
	}
	l.opts.OnWritten(w.vectors(), w.size)
}

// maxStageRetained bounds the staging buffer kept between appends.
const maxStageRetained = 4 << 20

// extPayload is the smallest payload written from the caller's memory
// rather than copied into the staging buffer.
const extPayload = 4 << 10

// batchWriter collects the bytes of one append to one segment: a staging
// buffer for headers and small records, and references to large payloads,
// each placed after a prefix of the staging buffer.
type batchWriter struct {
	at    int64 // segment offset where the batch starts
	buf   []byte
	ext   []extPiece
	size  int64 // bytes in the batch
	iovec [][]byte
}

type extPiece struct {
	after int // bytes of buf that precede it
	b     []byte
}

func (w *batchWriter) reset(at int64) {
	w.at, w.buf, w.ext, w.size = at, w.buf[:0], w.ext[:0], 0
}

func (w *batchWriter) end() int64 { return w.at + w.size }

// add encodes one record of n bytes.
func (w *batchWriter) add(h *Header, keys []Key, payload []byte, n int) {
	if len(payload) < extPayload {
		// Encode writes every byte, so the grown tail needs no clearing.
		w.buf = slices.Grow(w.buf, n)[:len(w.buf)+n]
		Encode(w.buf[len(w.buf)-n:], h, keys, payload)
	} else {
		hl := HeadLen(h, keys, payload)
		w.buf = slices.Grow(w.buf, hl)[:len(w.buf)+hl]
		rest := EncodeHead(w.buf[len(w.buf)-hl:], h, keys, payload)
		w.ext = append(w.ext, extPiece{after: len(w.buf), b: rest})
	}
	w.size += int64(n)
}

// vectors returns the batch as write vectors.
func (w *batchWriter) vectors() [][]byte {
	iov := w.iovec[:0]
	from := 0
	for _, x := range w.ext {
		if x.after > from {
			iov = append(iov, w.buf[from:x.after])
		}
		iov = append(iov, x.b)
		from = x.after
	}
	if from < len(w.buf) {
		iov = append(iov, w.buf[from:])
	}
	w.iovec = iov
	return iov
}

// release drops references to callers' payloads and oversized buffers.
func (w *batchWriter) release() {
	clear(w.ext)
	w.ext = w.ext[:0]
	clear(w.iovec)
	w.iovec = w.iovec[:0]
	if cap(w.buf) > maxStageRetained {
		w.buf = nil
	}
}

// maxDeferredBatch bounds the batches that sync mode leaves for the syncer
// to write.
const maxDeferredBatch = 256 << 10

// pendingWrite is bytes of the active segment that are published (offsets
// assigned, counted in written) but not yet in the file. Only sync mode uses
// it: readers see nothing past the synced end there, so the syncer can write
// everything pending with one pwrite right before its fsync, instead of one
// write per append.
type pendingWrite struct {
	s   *segment
	at  int64
	buf []byte
}

// commitBatch makes a batch part of the log: deferred to the syncer when it
// is small, all in memory and the log is in sync mode; written now
// otherwise (after whatever is pending, to keep the file in order). An
// append that asks for no fsync (now) is always written at once, so that
// it survives a process crash while it waits for someone else's fsync.
func (l *Log) commitBatch(s *segment, w *batchWriter, now bool) error {
	if w.size == 0 {
		return nil
	}
	if l.opts.Mode == SyncAlways && !now && len(w.ext) == 0 && w.size <= maxDeferredBatch {
		if len(l.pend.buf) > 0 && (l.pend.s != s || l.pend.at+int64(len(l.pend.buf)) != w.at) {
			if err := l.flushPendingLocked(); err != nil {
				return err
			}
		}
		if len(l.pend.buf) == 0 {
			l.pend.s, l.pend.at = s, w.at
		}
		l.pend.buf = append(l.pend.buf, w.buf...)
		s.used.Store(w.at + w.size)
		l.written.Store(int64(s.base) + w.at + w.size)
		return nil
	}
	if err := l.flushPendingLocked(); err != nil {
		return err
	}
	return l.writeBatch(s, w)
}

// flushPendingLocked writes the pending bytes now.
func (l *Log) flushPendingLocked() error {
	if len(l.pend.buf) == 0 {
		return nil
	}
	if err := l.writeSegment(l.pend.s, [][]byte{l.pend.buf}, l.pend.at); err != nil {
		return l.fail(err)
	}
	l.pend.buf, l.pend.s = l.pend.buf[:0], nil
	return nil
}

// fail records a sticky write or fsync error (l.mu held). Offsets were
// already assigned to the records being written, and after a failed fsync
// the kernel may have dropped the dirty pages it could not write, so the
// log cannot simply go on: every later append, and every wait for
// durability, fails until the process restarts and recovery rebuilds a
// consistent tail from what is really on disk.
func (l *Log) fail(err error) error {
	if l.failed == nil {
		l.failed = err
		l.failedErr.Store(&err)
		l.log.Error("commit log I/O failed; refusing further appends until restart", "err", err)
		l.wakeWaiters()
	}
	return l.failed
}

// Err returns the sticky I/O error that stopped the log, if any.
func (l *Log) Err() error {
	if p := l.failedErr.Load(); p != nil {
		return *p
	}
	return nil
}

// wakeWaiters releases every WaitSynced to look again.
func (l *Log) wakeWaiters() {
	l.syncMu.Lock()
	close(l.syncGen)
	l.syncGen = make(chan struct{})
	l.syncMu.Unlock()
}

// Faults injects I/O errors into a log for tests: a non-nil error from a
// hook fails that operation as the system call's error would.
type Faults struct {
	Write func(path string) error // before each pwritev of a segment
	Sync  func(path string) error // before each fdatasync of a segment
}

func (f *Faults) write(s *segment) error {
	if f == nil || f.Write == nil {
		return nil
	}
	return f.Write(s.path)
}

func (f *Faults) sync(s *segment) error {
	if f == nil || f.Sync == nil {
		return nil
	}
	return f.Sync(s.path)
}

// writeBatch writes the batch at its offset in segment s and publishes it.
func (l *Log) writeBatch(s *segment, w *batchWriter) error {
	if w.size == 0 {
		return nil
	}
	if w.size <= mapWriteMax && w.at+w.size <= int64(len(s.data)) {
		// A small batch is copied into the segment's shared mapping: the
		// same page cache a write would fill (durable across a process
		// kill, flushed by fsync), without a system call per send.
		off := w.at
		for _, v := range w.vectors() {
			off += int64(copy(s.data[off:], v))
		}
	} else if err := l.writeSegment(s, w.vectors(), w.at); err != nil {
		return l.fail(err)
	}
	s.used.Store(w.at + w.size)
	l.written.Store(int64(s.base) + w.at + w.size)
	return nil
}

// mapWriteMax is the largest batch written by copying into the mapping;
// larger ones use pwritev (cheaper per byte than faulting in many pages).
const mapWriteMax = 16 << 10

// writeSegment writes vectors at off in segment s.
func (l *Log) writeSegment(s *segment, iov [][]byte, off int64) error {
	if err := l.opts.Faults.write(s); err != nil {
		return fmt.Errorf("write segment %s: %w", s.path, err)
	}
	if err := pwritevAll(s.f, iov, off); err != nil {
		return fmt.Errorf("write segment: %w", err)
	}
	return nil
}

// pwritevAll writes every vector at off, resuming after short writes.
func pwritevAll(f *os.File, iov [][]byte, off int64) error {
	const iovMax = 1024
	for len(iov) > 0 {
		chunk := iov[:min(len(iov), iovMax)]
		n, err := unix.Pwritev(int(f.Fd()), chunk, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 && len(iov) > 0 {
			if n >= len(iov[0]) {
				n -= len(iov[0])
				iov = iov[1:]
			} else {
				iov[0] = iov[0][n:]
				n = 0
			}
		}
	}
	return nil
}

// rollLocked seals the active segment and starts a new one.
func (l *Log) rollLocked() error {
	if l.opts.BeforeRoll != nil {
		if err := l.opts.BeforeRoll(); err != nil {
			return err
		}
	}
	if err := l.flushPendingLocked(); err != nil {
		return err
	}
	old := l.active
	if err := old.seal(); err != nil {
		return err
	}
	s, err := createSegment(l.opts.Dir, old.end(), l.opts.SegmentSize)
	if err != nil {
		return err
	}
	segs := append(append([]*segment(nil), l.segments()...), s)
	l.setSegments(segs)
	l.active = s
	return nil
}

// WaitSynced blocks until the log is durable up to end, the context ends or
// the log closes.
func (l *Log) WaitSynced(ctx context.Context, end model.LogPos) error {
	for {
		l.syncMu.Lock()
		ch := l.syncGen
		l.syncMu.Unlock()
		if l.Synced() >= end {
			return nil
		}
		if err := l.Err(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			if l.Synced() >= end {
				return nil
			}
			return model.ErrClosed
		}
	}
}

// SyncTo asks for an fsync now, whatever the mode, and waits until the log
// is durable up to end.
func (l *Log) SyncTo(ctx context.Context, end model.LogPos) error {
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return l.WaitSynced(ctx, end)
}

func (l *Log) syncLoop(ctx context.Context) {
	defer close(l.done)
	// Async mode syncs on the tick; sync mode syncs when kicked, and on the
	// tick what deferred appends left.
	var tick <-chan time.Time
	if l.opts.FlushInterval > 0 {
		t := time.NewTicker(l.opts.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			if !l.crashed.Load() {
				l.syncOnce()
			}
			return
		case <-l.kick:
		case <-tick:
		}
		l.syncOnce()
	}
}

// syncOnce writes what is pending, fsyncs everything written so far and
// publishes the new end. Runs are serialised, so the synced end only grows
// and never passes bytes another run has yet to write.
func (l *Log) syncOnce() {
	l.syncRun.Lock()
	defer l.syncRun.Unlock()
	l.mu.Lock()
	target := l.written.Load()
	targetIndex := l.nextIndex - 1
	if target <= l.synced.Load() || l.failed != nil {
		l.mu.Unlock()
		return
	}
	p := l.pend
	l.pend = pendingWrite{buf: l.spare[:0]}
	l.spare = nil
	s := l.active
	if p.s != nil {
		s = p.s // pending bytes always belong to the active segment
	}
	ok := s != nil && s.acquire()
	l.mu.Unlock()
	if !ok {
		return
	}
	defer s.release()
	start := time.Now()
	if len(p.buf) > 0 {
		if err := l.writeSegment(s, [][]byte{p.buf}, p.at); err != nil {
			l.mu.Lock()
			l.fail(err)
			l.mu.Unlock()
			return
		}
	}
	err := l.opts.Faults.sync(s)
	if err != nil {
		err = fmt.Errorf("fdatasync %s: %w", s.path, err)
	} else {
		err = s.sync()
	}
	if cap(p.buf) <= maxStageRetained {
		l.mu.Lock()
		if l.spare == nil {
			l.spare = p.buf[:0]
		}
		l.mu.Unlock()
	}
	if err != nil {
		// Without a successful fsync nothing more may be acknowledged, and
		// a later fsync that succeeds proves nothing about these pages.
		l.mu.Lock()
		l.fail(err)
		l.mu.Unlock()
		return
	}
	l.synced.Store(target)
	l.syncedIndex.Store(uint64(targetIndex))
	if l.opts.OnSynced != nil {
		l.opts.OnSynced(model.LogPos(target), targetIndex, time.Since(start))
	}
	l.syncMu.Lock()
	close(l.syncGen)
	l.syncGen = make(chan struct{})
	l.syncMu.Unlock()
	if l.opts.Mode == SyncAlways && l.opts.OnVisible != nil {
		l.opts.OnVisible(model.LogPos(target))
	}
}

// Sync forces an fsync of everything written so far.
func (l *Log) Sync() { l.syncOnce() }

// Close syncs and closes the log. Readers holding views keep their mappings
// until they release them.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	<-l.done
	l.closeSegments()
	return nil
}

// PowerLoss stops the log as a power failure would (fault injection for
// storage tests): nothing more is written or synced, and every byte past
// the last fsync is lost — zeroed, as the page cache holding it would be.
func (l *Log) PowerLoss() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.crashed.Store(true)
	l.mu.Unlock()
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pend = pendingWrite{}
	err := l.truncateLocked(model.LogPos(l.synced.Load()))
	l.closeSegments()
	return err
}

func (l *Log) closeSegments() {
	p := l.segs.Load()
	if p == nil {
		return
	}
	for _, s := range *p {
		s.release()
	}
}

// View is a reference to one segment that keeps its mapping alive.
type View struct {
	s *segment
}

// Acquire returns a view of the segment holding pos. Release it when done.
func (l *Log) Acquire(pos model.LogPos) (View, error) {
	for try := 0; try < 3; try++ {
		segs := l.segments()
		i := sort.Search(len(segs), func(i int) bool { return segs[i].base > pos }) - 1
		if i < 0 {
			return View{}, fmt.Errorf("%w: position %d before log start %d", model.ErrOffsetOutOfRange, pos, segs[0].base)
		}
		s := segs[i]
		if pos >= s.base+model.LogPos(s.capacity) {
			return View{}, fmt.Errorf("%w: no segment holds position %d (deleted)", model.ErrOffsetOutOfRange, pos)
		}
		if s.acquire() {
			return View{s: s}, nil
		}
	}
	return View{}, fmt.Errorf("%w: segment at %d was deleted", model.ErrOffsetOutOfRange, pos)
}

// Bytes returns [pos, pos+n) if it lies in this view's segment.
func (v View) Bytes(pos model.LogPos, n int) ([]byte, bool) {
	off := int64(pos - v.s.base)
	if off < 0 || off+int64(n) > v.s.used.Load() {
		return nil, false
	}
	return v.s.data[off : off+int64(n) : off+int64(n)], true
}

// Contains reports whether pos lies in the view's segment data.
func (v View) Contains(pos model.LogPos) bool {
	return pos >= v.s.base && pos < v.s.end()
}

// Release drops the view's reference.
func (v View) Release() {
	if v.s != nil {
		v.s.release()
	}
}

// ReadRecord decodes and verifies the record at pos.
func (l *Log) ReadRecord(pos model.LogPos) (Record, View, error) {
	v, err := l.Acquire(pos)
	if err != nil {
		return Record{}, View{}, err
	}
	off := int64(pos - v.s.base)
	used := v.s.used.Load()
	if off >= used {
		v.Release()
		return Record{}, View{}, fmt.Errorf("%w: position %d past segment data", model.ErrOffsetOutOfRange, pos)
	}
	r, err := Decode(v.s.data[off:used])
	if err != nil {
		v.Release()
		return Record{}, View{}, err
	}
	return r, v, nil
}

// DeleteBefore deletes whole sealed segments that end at or before pos and
// returns how many it deleted. The active segment is never deleted.
func (l *Log) DeleteBefore(pos model.LogPos) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	segs := l.segments()
	n := 0
	for n < len(segs)-1 && segs[n].sealed.Load() && segs[n].end() <= pos && segs[n].end() <= l.Synced() {
		n++
	}
	if n == 0 {
		return 0, nil
	}
	var errs []error
	for _, s := range segs[:n] {
		if err := os.Remove(s.path); err != nil {
			errs = append(errs, fmt.Errorf("delete segment: %w", err))
		}
		s.release()
	}
	l.setSegments(append([]*segment(nil), segs[n:]...))
	return n, errors.Join(errs...)
}

// DeleteSegment deletes the sealed segment based at base if it ends at or
// before upTo and is synced (the caller knows nothing in it is needed and
// that recovery starts after it). Readers holding views keep their mapping
// until they release it. Deleting a segment in the middle leaves a gap.
func (l *Log) DeleteSegment(base, upTo model.LogPos) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	segs := l.segments()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base >= base })
	if i >= len(segs)-1 || segs[i].base != base {
		return false, nil // unknown, or the active segment
	}
	s := segs[i]
	if !s.sealed.Load() || s.end() > upTo || s.end() > l.Synced() {
		return false, nil
	}
	rest := make([]*segment, 0, len(segs)-1)
	rest = append(append(rest, segs[:i]...), segs[i+1:]...)
	l.setSegments(rest)
	err := os.Remove(s.path)
	s.release()
	if err != nil {
		return true, fmt.Errorf("delete segment: %w", err)
	}
	return true, nil
}

// SegmentInfo describes one segment for retention decisions.
type SegmentInfo struct {
	Base, End model.LogPos
	LastTime  int64
	Sealed    bool
}

// Segments describes the segments in order.
func (l *Log) Segments() []SegmentInfo {
	segs := l.segments()
	out := make([]SegmentInfo, len(segs))
	for i, s := range segs {
		out[i] = SegmentInfo{Base: s.base, End: s.end(), LastTime: s.lastTime.Load(), Sealed: s.sealed.Load()}
	}
	return out
}

// SegmentBase returns the base of the segment holding pos (false when no
// segment does).
func (l *Log) SegmentBase(pos model.LogPos) (model.LogPos, bool) {
	segs := l.segments()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > pos }) - 1
	if i < 0 || pos >= segs[i].base+model.LogPos(segs[i].capacity) {
		return 0, false
	}
	return segs[i].base, true
}
