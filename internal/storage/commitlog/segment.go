package commitlog

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
)

const segmentSuffix = ".log"

// segment is one memory-mapped file of the log. Its bytes are
// [base, base+used) in log positions.
type segment struct {
	base model.LogPos
	path string
	f    *os.File
	data []byte // the mapping; len(data) is the capacity
	// capacity is len(data) as mapped, for lookups that hold no reference
	// (data goes nil when the last reference is released).
	capacity int64
	used     atomic.Int64
	sealed   atomic.Bool
	refs     atomic.Int32 // one for the log's list plus one per reader
	lastTime atomic.Int64 // newest StoreTime in the segment, for retention
}

func segmentName(base model.LogPos) string {
	return fmt.Sprintf("%020d%s", int64(base), segmentSuffix)
}

// listSegments returns the base positions of the segment files in dir, in order.
func listSegments(dir string) ([]model.LogPos, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var bases []model.LogPos
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(name, segmentSuffix), 10, 64)
		if err != nil || n < 0 {
			continue
		}
		bases = append(bases, model.LogPos(n))
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

// createSegment creates and preallocates a new active segment.
func createSegment(dir string, base model.LogPos, capacity int64) (*segment, error) {
	path := filepath.Join(dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	if err := preallocate(f, capacity); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	s, err := mapSegment(f, path, base, capacity, true)
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// openSegment maps an existing segment. A writable segment is first grown to
// capacity so that appends can continue in it.
func openSegment(dir string, base model.LogPos, capacity int64, writable bool) (*segment, error) {
	path := filepath.Join(dir, segmentName(base))
	flag := os.O_RDONLY
	if writable {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("open segment: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat segment: %w", err)
	}
	size := st.Size()
	if writable && size < capacity {
		if err := preallocate(f, capacity); err != nil {
			f.Close()
			return nil, err
		}
		size = capacity
	}
	s, err := mapSegment(f, path, base, size, writable)
	if err != nil {
		f.Close()
		return nil, err
	}
	if !writable {
		s.used.Store(size)
		s.sealed.Store(true)
	}
	return s, nil
}

func mapSegment(f *os.File, path string, base model.LogPos, size int64, writable bool) (*segment, error) {
	s := &segment{base: base, path: path, f: f}
	s.refs.Store(1)
	if size == 0 {
		return s, nil
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap segment %s: %w", path, err)
	}
	s.data, s.capacity = data, int64(len(data))
	return s, nil
}

func preallocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if err == nil {
		return nil
	}
	if err == unix.ENOSPC {
		return fmt.Errorf("preallocate segment: %w: %v", model.ErrDiskFull, err)
	}
	// File systems without fallocate get a sparse file; the disk guard keeps
	// enough free space that mapped writes cannot fail.
	if terr := f.Truncate(size); terr != nil {
		return fmt.Errorf("size segment: %w", terr)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	return nil
}

// end is the log position just past the segment's data.
func (s *segment) end() model.LogPos { return s.base + model.LogPos(s.used.Load()) }

// sync writes the segment's dirty pages to disk.
func (s *segment) sync() error {
	if err := unix.Fdatasync(int(s.f.Fd())); err != nil {
		return fmt.Errorf("fdatasync %s: %w", s.path, err)
	}
	return nil
}

// seal shrinks the file to its data and remaps it read-only.
func (s *segment) seal() error {
	used := s.used.Load()
	if err := s.f.Truncate(used); err != nil {
		return fmt.Errorf("seal segment: %w", err)
	}
	if err := s.sync(); err != nil {
		return err
	}
	s.sealed.Store(true)
	return nil
}

func (s *segment) acquire() bool {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a reference; the last one unmaps and closes the file, and
// removes it when the segment was deleted.
func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		s.close()
	}
}

func (s *segment) close() {
	if s.data != nil {
		_ = unix.Munmap(s.data)
		s.data = nil
	}
	_ = s.f.Close()
}
