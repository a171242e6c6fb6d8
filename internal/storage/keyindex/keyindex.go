// Package keyindex finds messages by key or unique id: a hash index over the
// commit log in files of fixed capacity, in the manner of RocketMQ's index
// files.
//
// # File format (little endian)
//
//	header (64 bytes):
//	  "RKIX" | version u32 (1) | slots u32 | capacity u32 | count u32 |
//	  reserved u32 | first time i64 | last time i64 | first pos i64 |
//	  last pos i64 | reserved (8)
//	slots:   slots × u32   number+1 of the newest entry in the bucket, 0 = empty
//	entries: capacity × 32 bytes
//	  key hash u64 | queue u32 | prev u32 (number+1, 0 = end) | offset i64 | store time i64
//
// Files are named by a sequence number and filled one after another; the
// newest is memory-mapped for writing. A lookup walks the bucket chains from
// the newest file to the oldest and returns candidates: the caller reads each
// candidate message and compares the key, since different keys can share a
// hash. The index is derived data: the storage engine re-adds the keys of
// replayed records after a crash, and lookups drop the duplicates that causes.
package keyindex

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
)

const (
	headerSize = 64
	entrySize  = 32
	version    = 1
	suffix     = ".kidx"
)

var magic = [4]byte{'R', 'K', 'I', 'X'}

// Hit is one candidate location of a key.
type Hit struct {
	Queue     model.QueueID
	Offset    model.QueueOffset
	StoreTime int64
}

// Entry is one decoded index entry.
type Entry struct {
	Hash      uint64
	Queue     model.QueueID
	Prev      uint32
	Offset    model.QueueOffset
	StoreTime int64
}

// DecodeEntry decodes one 32-byte entry.
func DecodeEntry(b []byte) (Entry, error) {
	if len(b) < entrySize {
		return Entry{}, fmt.Errorf("%w: key index entry of %d bytes", model.ErrCorruptRecord, len(b))
	}
	le := binary.LittleEndian
	e := Entry{
		Hash:      le.Uint64(b),
		Queue:     model.QueueID(le.Uint32(b[8:])),
		Prev:      le.Uint32(b[12:]),
		Offset:    model.QueueOffset(le.Uint64(b[16:])),
		StoreTime: int64(le.Uint64(b[24:])),
	}
	if e.Offset < 0 {
		return Entry{}, fmt.Errorf("%w: negative offset in key index", model.ErrCorruptRecord)
	}
	return e, nil
}

func (e Entry) encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b, e.Hash)
	le.PutUint32(b[8:], uint32(e.Queue))
	le.PutUint32(b[12:], e.Prev)
	le.PutUint64(b[16:], uint64(e.Offset))
	le.PutUint64(b[24:], uint64(e.StoreTime))
}

// Hash is the stable 64-bit FNV-1a hash of a key.
func Hash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

type file struct {
	seq      int64
	path     string
	f        *os.File
	data     []byte
	slots    uint32
	capacity uint32
}

func (f *file) count() uint32        { return binary.LittleEndian.Uint32(f.data[16:]) }
func (f *file) setCount(n uint32)    { binary.LittleEndian.PutUint32(f.data[16:], n) }
func (f *file) lastPos() int64       { return int64(binary.LittleEndian.Uint64(f.data[48:])) }
func (f *file) slot(i uint32) []byte { return f.data[headerSize+4*int(i):] }
func (f *file) entry(n uint32) []byte {
	return f.data[headerSize+4*int(f.slots)+entrySize*int(n):]
}

// Index is the set of key index files in one directory.
type Index struct {
	dir      string
	slots    uint32
	capacity uint32

	mu    sync.Mutex
	files []*file // oldest first; the last one takes new entries
}

// Open opens the key index in dir, creating it if needed.
func Open(dir string, slots, capacity int) (*Index, error) {
	if slots <= 0 || capacity <= 0 || capacity >= 1<<31 {
		return nil, fmt.Errorf("%w: key index slots %d capacity %d", model.ErrInvalidConfig, slots, capacity)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create key index dir: %w", err)
	}
	ix := &Index{dir: dir, slots: uint32(slots), capacity: uint32(capacity)}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list key index: %w", err)
	}
	var seqs []int64
	for _, de := range ents {
		if n, err := strconv.ParseInt(strings.TrimSuffix(de.Name(), suffix), 10, 64); err == nil && strings.HasSuffix(de.Name(), suffix) {
			seqs = append(seqs, n)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, s := range seqs {
		f, err := ix.openFile(s, false)
		if err != nil {
			// A damaged key index file is derived data: drop it.
			os.Remove(filepath.Join(dir, fileName(s)))
			continue
		}
		ix.files = append(ix.files, f)
	}
	return ix, nil
}

func fileName(seq int64) string { return fmt.Sprintf("%020d%s", seq, suffix) }

func (ix *Index) openFile(seq int64, create bool) (*file, error) {
	path := filepath.Join(ix.dir, fileName(seq))
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open key index: %w", err)
	}
	size := int64(headerSize) + 4*int64(ix.slots) + entrySize*int64(ix.capacity)
	if create {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("size key index: %w", err)
		}
	} else {
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		size = st.Size()
	}
	if size < headerSize {
		f.Close()
		return nil, fmt.Errorf("%w: key index file too small", model.ErrCorruptRecord)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mmap key index: %w", err)
	}
	kf := &file{seq: seq, path: path, f: f, data: data}
	le := binary.LittleEndian
	if create {
		copy(data, magic[:])
		le.PutUint32(data[4:], version)
		le.PutUint32(data[8:], ix.slots)
		le.PutUint32(data[12:], ix.capacity)
	} else if [4]byte(data[:4]) != magic || le.Uint32(data[4:]) != version {
		kf.close()
		return nil, fmt.Errorf("%w: bad key index header", model.ErrCorruptRecord)
	}
	kf.slots, kf.capacity = le.Uint32(data[8:]), le.Uint32(data[12:])
	if int64(headerSize)+4*int64(kf.slots)+entrySize*int64(kf.capacity) > size || kf.slots == 0 || kf.count() > kf.capacity {
		kf.close()
		return nil, fmt.Errorf("%w: key index geometry", model.ErrCorruptRecord)
	}
	return kf, nil
}

func (f *file) close() {
	unix.Munmap(f.data)
	f.f.Close()
}

// Add records that key hash h is at (queue, offset), in a record at pos.
func (ix *Index) Add(h uint64, q model.QueueID, off model.QueueOffset, storeTime int64, pos model.LogPos) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var f *file
	if n := len(ix.files); n > 0 && ix.files[n-1].count() < ix.files[n-1].capacity {
		f = ix.files[n-1]
	} else {
		seq := int64(0)
		if n > 0 {
			seq = ix.files[n-1].seq + 1
		}
		nf, err := ix.openFile(seq, true)
		if err != nil {
			return err
		}
		ix.files = append(ix.files, nf)
		f = nf
	}
	n := f.count()
	slot := f.slot(uint32(h % uint64(f.slots)))
	prev := binary.LittleEndian.Uint32(slot)
	Entry{Hash: h, Queue: q, Prev: prev, Offset: off, StoreTime: storeTime}.encode(f.entry(n))
	binary.LittleEndian.PutUint32(slot, n+1)
	le := binary.LittleEndian
	if n == 0 {
		le.PutUint64(f.data[32:], uint64(storeTime))
		le.PutUint64(f.data[48:], uint64(pos))
	}
	le.PutUint64(f.data[40:], uint64(storeTime))
	le.PutUint64(f.data[48:], uint64(pos))
	f.setCount(n + 1)
	return nil
}

// Lookup returns up to max distinct candidates for key hash h, newest first,
// with store times in [from, to] (to <= 0 means no upper bound).
func (ix *Index) Lookup(h uint64, max int, from, to int64) []Hit {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var hits []Hit
	seen := map[Hit]bool{}
	for i := len(ix.files) - 1; i >= 0 && len(hits) < max; i-- {
		f := ix.files[i]
		count := f.count()
		n := binary.LittleEndian.Uint32(f.slot(uint32(h % uint64(f.slots))))
		for steps := uint32(0); n != 0 && n <= count && steps < count && len(hits) < max; steps++ {
			e, err := DecodeEntry(f.entry(n - 1))
			if err != nil || e.Prev >= n {
				break
			}
			if e.Hash == h && e.StoreTime >= from && (to <= 0 || e.StoreTime <= to) {
				hit := Hit{Queue: e.Queue, Offset: e.Offset, StoreTime: e.StoreTime}
				if !seen[hit] {
					seen[hit] = true
					hits = append(hits, hit)
				}
			}
			n = e.Prev
		}
	}
	return hits
}

// Sync flushes the writable file to disk.
func (ix *Index) Sync() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if n := len(ix.files); n > 0 {
		if err := unix.Msync(ix.files[n-1].data, unix.MS_SYNC); err != nil {
			return fmt.Errorf("sync key index: %w", err)
		}
	}
	return nil
}

// DeleteBefore removes full files whose newest entry is in a record before
// pos (the log start), keeping the writable one.
func (ix *Index) DeleteBefore(pos model.LogPos) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	for n < len(ix.files)-1 && ix.files[n].lastPos() < int64(pos) {
		ix.files[n].close()
		os.Remove(ix.files[n].path)
		n++
	}
	ix.files = append([]*file(nil), ix.files[n:]...)
	return n
}

// Files returns the number of key index files.
func (ix *Index) Files() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return len(ix.files)
}

// Close unmaps every file.
func (ix *Index) Close() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, f := range ix.files {
		f.close()
	}
	ix.files = nil
}
