package commitlog

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
)

// recover opens the segments, scans the tail from rec.Pos, and truncates the
// log at the first record that is torn or fails its checksum.
func (l *Log) recover(rec Recovery, visit func(model.LogPos, *Record) error) error {
	bases, err := listSegments(l.opts.Dir)
	if err != nil {
		return err
	}
	if len(bases) == 0 {
		base := rec.Pos
		if base < 0 {
			base = 0
		}
		s, err := createSegment(l.opts.Dir, base, l.opts.SegmentSize)
		if err != nil {
			return err
		}
		l.setSegments([]*segment{s})
		l.active = s
		l.nextIndex = max(rec.NextIndex, 1)
		l.written.Store(int64(base))
		l.synced.Store(int64(base))
		return nil
	}
	segs := make([]*segment, 0, len(bases))
	l.setSegments(segs)
	for i, base := range bases {
		last := i == len(bases)-1
		s, err := openSegment(l.opts.Dir, base, l.opts.SegmentSize, last)
		if err != nil {
			return err
		}
		segs = append(segs, s)
		l.setSegments(segs)
		if !last && s.end() < bases[i+1] {
			// A gap: segments garbage collection deleted (whole sealed
			// segments nothing needed, always before a checkpoint).
			if bases[i+1] > rec.Pos {
				l.log.Warn("gap between segment files after the checkpoint", "segment", s.path, "end", s.end(), "next", bases[i+1])
			}
			continue
		}
		if !last && s.end() != bases[i+1] {
			// An overlap: the files after it cannot be trusted. Keep this
			// one as the tail and drop the rest.
			l.log.Warn("segment files are not contiguous; dropping later segments",
				"segment", s.path, "end", s.end(), "next", bases[i+1])
			for _, b := range bases[i+1:] {
				if err := os.Remove(l.opts.Dir + "/" + segmentName(b)); err != nil {
					return fmt.Errorf("drop segment: %w", err)
				}
			}
			if err := l.reopenWritable(s); err != nil {
				return err
			}
			break
		}
	}
	segs = l.segments()
	l.active = segs[len(segs)-1]
	l.active.sealed.Store(false)

	start := rec.Pos
	if start < segs[0].base {
		start = segs[0].base
	}
	expect := rec.NextIndex
	if expect == 0 && start > segs[0].base {
		// A recovery point without an index (an older checkpoint): take it
		// from the last record before the point.
		expect = l.indexAfterRecordBefore(start)
	}
	l.nextIndex = max(expect, 1)
	end, err := l.scan(start, expect, visit)
	if err != nil {
		return err
	}
	l.written.Store(int64(end))
	l.synced.Store(int64(end))
	l.syncedIndex.Store(uint64(l.nextIndex - 1))
	return nil
}

// reopenWritable remaps a sealed segment read-write at full capacity.
func (l *Log) reopenWritable(s *segment) error {
	used := s.used.Load()
	s.close()
	ns, err := openSegment(l.opts.Dir, s.base, l.opts.SegmentSize, true)
	if err != nil {
		return err
	}
	s.f, s.data, s.capacity = ns.f, ns.data, ns.capacity
	s.used.Store(used)
	s.sealed.Store(false)
	return nil
}

// scan walks records from pos to the end of the log, calls visit for each,
// sets every segment's used size, and truncates the log at the first bad
// record. It returns the end of the valid data.
func (l *Log) scan(pos model.LogPos, expect model.Index, visit func(model.LogPos, *Record) error) (model.LogPos, error) {
	segs := l.segments()
	i := 0
	for i < len(segs)-1 && segs[i+1].base <= pos {
		i++
	}
	if pos > segs[i].base+model.LogPos(len(segs[i].data)) {
		pos = segs[i].base
	}
	for ; i < len(segs); i++ {
		s := segs[i]
		if s.base > pos {
			// Crossing a gap left by a deleted segment: the record indexes
			// of the records in it are gone too.
			expect = 0
		}
		off := int64(pos - s.base)
		if off < 0 {
			off = 0
		}
		limit := int64(len(s.data))
		for off < limit {
			r, err := Decode(s.data[off:limit])
			if errors.Is(err, ErrEnd) {
				break
			}
			if l.opts.ForeignIndexes {
				expect = 0
			}
			if err == nil && expect != 0 && r.Index == 1 && expect > 1 {
				// Versions before checkpoints kept the index restarted
				// the sequence at 1 on every clean start.
				l.log.Info("record index sequence restarts (written by an older version)", "pos", s.base+model.LogPos(off), "expected", expect)
				expect = 1
			}
			if err == nil && expect != 0 && r.Index != expect {
				err = fmt.Errorf("%w: record index %d, expected %d", model.ErrCorruptRecord, r.Index, expect)
			}
			if err != nil {
				at := s.base + model.LogPos(off)
				l.log.Warn("truncating log tail at bad record", "pos", at, "err", err)
				return at, l.truncateLocked(at)
			}
			at := s.base + model.LogPos(off)
			r.Pos, r.Segment = at, s.base
			if visit != nil {
				if err := visit(at, &r); err != nil {
					return 0, err
				}
			}
			if !l.opts.ForeignIndexes {
				l.nextIndex = r.Index + 1
				expect = l.nextIndex
			}
			if r.StoreTime > s.lastTime.Load() {
				s.lastTime.Store(r.StoreTime)
			}
			off += int64(r.Length)
		}
		if s.sealed.Load() && off != s.used.Load() {
			at := s.base + model.LogPos(off)
			l.log.Warn("sealed segment ends early; truncating log", "segment", s.path, "pos", at)
			return at, l.truncateLocked(at)
		}
		s.used.Store(off)
		pos = s.end()
	}
	return l.active.end(), nil
}

// TruncateTo drops every record at or after pos, which must be a record
// boundary, and returns the index the next record will get. Used by recovery
// and, in cluster mode, to cut a follower's divergent tail.
func (l *Log) TruncateTo(pos model.LogPos) (model.Index, error) {
	l.syncRun.Lock()
	defer l.syncRun.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.flushPendingLocked(); err != nil {
		return 0, err
	}
	if pos >= l.End() {
		return l.nextIndex, nil
	}
	r, v, err := l.ReadRecord(pos)
	if err != nil {
		return 0, fmt.Errorf("truncate: %w", err)
	}
	next := r.Index
	v.Release()
	if err := l.truncateLocked(pos); err != nil {
		return 0, err
	}
	l.nextIndex = next
	l.written.Store(int64(pos))
	if l.synced.Load() > int64(pos) {
		l.synced.Store(int64(pos))
		l.syncedIndex.Store(uint64(next - 1))
	}
	return next, nil
}

// truncateLocked makes pos the end of the log: later segments are deleted and
// the bytes after pos in its segment are cleared.
func (l *Log) truncateLocked(pos model.LogPos) error {
	segs := l.segments()
	i := len(segs) - 1
	for i > 0 && segs[i].base > pos {
		i--
	}
	for _, s := range segs[i+1:] {
		if err := os.Remove(s.path); err != nil {
			return fmt.Errorf("truncate: delete segment: %w", err)
		}
		s.release()
	}
	s := segs[i]
	l.setSegments(append([]*segment(nil), segs[:i+1]...))
	if s.sealed.Load() {
		if err := l.reopenWritable(s); err != nil {
			return err
		}
	}
	off := int64(pos - s.base)
	if err := clearFrom(s, off); err != nil {
		return err
	}
	s.used.Store(off)
	l.active = s
	return s.sync()
}

// clearFrom zeroes a segment from off to its capacity: the partial page by
// hand, the rest by punching a hole and allocating it again.
func clearFrom(s *segment, off int64) error {
	const page = 4096
	capacity := int64(len(s.data))
	head := min((off+page-1)/page*page, capacity)
	clear(s.data[off:head])
	if head >= capacity {
		return nil
	}
	fd := int(s.f.Fd())
	err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, head, capacity-head)
	if err == nil {
		err = unix.Fallocate(fd, 0, head, capacity-head)
	}
	if err != nil {
		clear(s.data[head:])
	}
	return nil
}

// indexAfterRecordBefore returns the index following that of the last valid
// record ending at or before pos in pos's segment (0 when there is none).
func (l *Log) indexAfterRecordBefore(pos model.LogPos) model.Index {
	var next model.Index
	for _, s := range l.segments() {
		if pos <= s.base || pos > s.base+model.LogPos(len(s.data)) {
			continue
		}
		limit := int64(pos - s.base)
		for off := int64(0); off < limit; {
			r, err := Decode(s.data[off:limit])
			if err != nil {
				break
			}
			next = r.Index + 1
			off += int64(r.Length)
		}
	}
	return next
}
