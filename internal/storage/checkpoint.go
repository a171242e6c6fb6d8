package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// The checkpoint file (little endian):
//
//	"RCKP" | version u32 (1) | log pos i64 | queue count u32 |
//	count × { queue id u32 | first i64 | flushed i64 | next i64 | start i64 | max time i64 } |
//	crc32c u32 of everything before it
const (
	checkpointName    = "checkpoint"
	checkpointVersion = 1
	ckptQueueSize     = 44
	ckptHeaderSize    = 20
)

var ckptMagic = [4]byte{'R', 'C', 'K', 'P'}

type queueCheckpoint struct {
	ID    model.QueueID
	State queueindex.State
}

type checkpointData struct {
	LogPos model.LogPos
	Queues []queueCheckpoint
}

func encodeCheckpoint(c checkpointData) []byte {
	le := binary.LittleEndian
	b := make([]byte, ckptHeaderSize+ckptQueueSize*len(c.Queues)+4)
	copy(b, ckptMagic[:])
	le.PutUint32(b[4:], checkpointVersion)
	le.PutUint64(b[8:], uint64(c.LogPos))
	le.PutUint32(b[16:], uint32(len(c.Queues)))
	p := ckptHeaderSize
	for _, q := range c.Queues {
		le.PutUint32(b[p:], uint32(q.ID))
		le.PutUint64(b[p+4:], uint64(q.State.First))
		le.PutUint64(b[p+12:], uint64(q.State.Flushed))
		le.PutUint64(b[p+20:], uint64(q.State.Next))
		le.PutUint64(b[p+28:], uint64(q.State.Start))
		le.PutUint64(b[p+36:], uint64(q.State.MaxTime))
		p += ckptQueueSize
	}
	le.PutUint32(b[p:], crc32.Checksum(b[:p], castagnoli))
	return b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeCheckpoint parses and verifies a checkpoint file.
func decodeCheckpoint(b []byte) (checkpointData, error) {
	var c checkpointData
	le := binary.LittleEndian
	if len(b) < ckptHeaderSize+4 || [4]byte(b[:4]) != ckptMagic {
		return c, fmt.Errorf("%w: checkpoint header", model.ErrCorruptRecord)
	}
	if v := le.Uint32(b[4:]); v != checkpointVersion {
		return c, fmt.Errorf("%w: checkpoint version %d", model.ErrUnsupportedVersion, v)
	}
	n := int64(le.Uint32(b[16:]))
	want := int64(ckptHeaderSize) + ckptQueueSize*n + 4
	if int64(len(b)) != want {
		return c, fmt.Errorf("%w: checkpoint of %d bytes, want %d", model.ErrCorruptRecord, len(b), want)
	}
	p := int(want - 4)
	if crc32.Checksum(b[:p], castagnoli) != le.Uint32(b[p:]) {
		return c, fmt.Errorf("%w: checkpoint checksum", model.ErrCorruptRecord)
	}
	c.LogPos = model.LogPos(le.Uint64(b[8:]))
	if c.LogPos < 0 {
		return c, fmt.Errorf("%w: checkpoint position", model.ErrCorruptRecord)
	}
	c.Queues = make([]queueCheckpoint, n)
	p = ckptHeaderSize
	for i := range c.Queues {
		s := queueindex.State{
			First:   int64(le.Uint64(b[p+4:])),
			Flushed: int64(le.Uint64(b[p+12:])),
			Next:    model.QueueOffset(le.Uint64(b[p+20:])),
			Start:   model.QueueOffset(le.Uint64(b[p+28:])),
			MaxTime: int64(le.Uint64(b[p+36:])),
		}
		if s.First < 0 || s.Flushed < s.First || s.Next < 0 || s.Start < 0 || s.Start > s.Next {
			return c, fmt.Errorf("%w: checkpoint queue state %+v", model.ErrCorruptRecord, s)
		}
		c.Queues[i] = queueCheckpoint{ID: model.QueueID(le.Uint32(b[p:])), State: s}
		p += ckptQueueSize
	}
	return c, nil
}

// readCheckpoint loads the checkpoint; a missing one is empty. A damaged one
// is also treated as empty: recovery then replays the whole log.
func readCheckpoint(path string) (checkpointData, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return checkpointData{}, nil
	}
	if err != nil {
		return checkpointData{}, fmt.Errorf("read checkpoint: %w", err)
	}
	c, err := decodeCheckpoint(b)
	if err != nil {
		if errors.Is(err, model.ErrUnsupportedVersion) {
			return c, err
		}
		// Index files cannot be trusted without it: start them over.
		_ = os.RemoveAll(filepath.Join(filepath.Dir(path), "index"))
		return checkpointData{}, nil
	}
	return c, nil
}

// checkpoint writes out every index tail, makes the log and the index files
// durable, and then records the position below which they are complete.
func (e *Engine) checkpoint() error {
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	pos := e.clog.End() // every record before pos has its index entries in memory
	if err := e.flushIndexes(1); err != nil {
		return err
	}
	e.clog.Sync()
	if e.clog.Synced() < pos {
		return fmt.Errorf("checkpoint: log not synced to %d", pos)
	}
	e.qmu.RLock()
	qs := make([]queueCheckpoint, 0, len(e.queues))
	list := make([]*queue, 0, len(e.queues))
	for id, q := range e.queues {
		qs = append(qs, queueCheckpoint{ID: id})
		list = append(list, q)
	}
	e.qmu.RUnlock()
	// One syncfs makes every index file durable, however many queues there
	// are; per-file fsyncs would cost one disk flush per active queue.
	if err := syncFS(filepath.Join(e.cfg.Dir, "index")); err != nil {
		return err
	}
	for i, q := range list {
		qs[i].State = q.idx.State()
	}
	if err := e.keys.Sync(); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(e.cfg.Dir, checkpointName), encodeCheckpoint(checkpointData{LogPos: pos, Queues: qs})); err != nil {
		return err
	}
	e.stats.Checkpoints.Add(1)
	return nil
}

func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncfs: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncfs: %w", err)
	}
	return nil
}

// flushIndexes writes the in-memory index tails of queues appended to since
// the last flush that hold at least minEntries entries; the others stay on
// the list for a later flush or the next checkpoint. Writing small tails less
// often keeps file opens and writes per queue low when there are very many
// queues.
func (e *Engine) flushIndexes(minEntries int) error {
	e.pmu.Lock()
	list := e.flushPending
	e.flushPending = nil
	keep := list[:0:0]
	var todo []*queue
	for _, q := range list {
		if q.idx.TailLen() >= minEntries {
			q.pendingFlush.Store(false)
			todo = append(todo, q)
		} else {
			keep = append(keep, q)
		}
	}
	e.flushPending = append(e.flushPending, keep...)
	e.pmu.Unlock()
	var errs []error
	for _, q := range todo {
		if err := q.idx.Flush(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
