package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// The checkpoint file (little endian):
//
//	"RCKP" | version u32 (2) | log pos i64 | queue count u32 |
//	count × { queue id u32 | first i64 | flushed i64 | next i64 | start i64 | max time i64 } |
//	section count u32 | count × { name len u16 | name | data len u32 | data } |   (version 2 only)
//	crc32c u32 of everything before it
//
// Sections hold the snapshots of the engine's StateKeepers, taken at the
// same checkpoint. Version 1 files (no sections) are still read.
const (
	checkpointName    = "checkpoint"
	checkpointVersion = 2
	ckptQueueSize     = 44
	ckptHeaderSize    = 20
)

var ckptMagic = [4]byte{'R', 'C', 'K', 'P'}

type queueCheckpoint struct {
	ID    model.QueueID
	State queueindex.State
}

type checkpointData struct {
	LogPos   model.LogPos
	Queues   []queueCheckpoint
	Sections map[string][]byte // StateKeeper name → snapshot
}

func encodeCheckpoint(c checkpointData) []byte {
	le := binary.LittleEndian
	size := ckptHeaderSize + ckptQueueSize*len(c.Queues) + 4 + 4
	names := make([]string, 0, len(c.Sections))
	for name, data := range c.Sections {
		names = append(names, name)
		size += 2 + len(name) + 4 + len(data)
	}
	sort.Strings(names)
	b := make([]byte, size)
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
	le.PutUint32(b[p:], uint32(len(names)))
	p += 4
	for _, name := range names {
		le.PutUint16(b[p:], uint16(len(name)))
		p += 2 + copy(b[p+2:], name)
		data := c.Sections[name]
		le.PutUint32(b[p:], uint32(len(data)))
		p += 4 + copy(b[p+4:], data)
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
	version := le.Uint32(b[4:])
	if version != 1 && version != checkpointVersion {
		return c, fmt.Errorf("%w: checkpoint version %d", model.ErrUnsupportedVersion, version)
	}
	p := len(b) - 4
	if crc32.Checksum(b[:p], castagnoli) != le.Uint32(b[p:]) {
		return c, fmt.Errorf("%w: checkpoint checksum", model.ErrCorruptRecord)
	}
	n := int64(le.Uint32(b[16:]))
	queuesEnd := int64(ckptHeaderSize) + ckptQueueSize*n
	if version == 1 && int64(len(b)) != queuesEnd+4 || version > 1 && int64(len(b)) < queuesEnd+8 {
		return c, fmt.Errorf("%w: checkpoint of %d bytes for %d queues", model.ErrCorruptRecord, len(b), n)
	}
	if version > 1 {
		var err error
		if c.Sections, err = decodeSections(b[queuesEnd:p]); err != nil {
			return c, err
		}
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

// decodeSections parses the StateKeeper sections of a checkpoint.
func decodeSections(b []byte) (map[string][]byte, error) {
	le := binary.LittleEndian
	bad := fmt.Errorf("%w: checkpoint sections", model.ErrCorruptRecord)
	count := le.Uint32(b)
	b = b[4:]
	out := map[string][]byte{}
	for i := uint32(0); i < count; i++ {
		if len(b) < 2 {
			return nil, bad
		}
		nl := int(le.Uint16(b))
		if len(b) < 2+nl+4 {
			return nil, bad
		}
		name := string(b[2 : 2+nl])
		b = b[2+nl:]
		dl := int64(le.Uint32(b))
		if int64(len(b)-4) < dl {
			return nil, bad
		}
		out[name] = b[4 : 4+dl : 4+dl]
		b = b[4+dl:]
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

// nextIndexSection names the checkpoint section holding the record index
// that follows the checkpoint position.
const nextIndexSection = "storage.next-index"

// nextIndex returns the record index following the checkpoint position (0
// when unknown: the log finds it).
func (c checkpointData) nextIndex() model.Index {
	if b := c.Sections[nextIndexSection]; len(b) == 8 {
		return model.Index(binary.LittleEndian.Uint64(b))
	}
	return 0
}

// readCheckpoint loads the checkpoint; a missing or damaged one is empty:
// recovery then replays the whole log into new index files.
func readCheckpoint(path string) (checkpointData, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		// Index files flushed before a first checkpoint was written cannot
		// be trusted either.
		_ = os.RemoveAll(filepath.Join(filepath.Dir(path), "index"))
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

// Checkpoint writes a checkpoint now (one is written every
// checkpoint interval and at Close).
func (e *Engine) Checkpoint() error { return e.checkpoint() }

// checkpoint writes out every index tail, makes the log and the index files
// durable, and then records the position below which they are complete.
func (e *Engine) checkpoint() error {
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	pos, next := e.clog.Tail() // every record before pos has its index entries in memory
	// State keepers capture after pos is read, so each snapshot reflects at
	// least every record before pos; it may reflect later ones too, which
	// replay tolerates. Syncing after the capture makes every record a
	// snapshot reflects durable before the snapshot is.
	sections := map[string][]byte{}
	for _, k := range e.cfg.StateKeepers {
		data, err := k.Capture()
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", k.Name(), err)
		}
		sections[k.Name()] = data
	}
	e.sectionMu.Lock()
	providers := maps.Clone(e.sectionProviders)
	e.sectionMu.Unlock()
	for name, capture := range providers {
		data, err := capture()
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", name, err)
		}
		sections[name] = data
	}
	if e.cfg.Replicated {
		// A replica's checkpoint reflects committed records only, so no
		// truncation can ever cut what it reflects: appends pause until
		// everything written — all the sections may reflect — is
		// committed, and the queue indexes are captured in that state.
		// (The sections were captured before the pause: writers hold
		// their state's locks while they append.)
		e.repl.pause.Lock()
		defer e.repl.pause.Unlock()
		wait := 2 * time.Second
		if e.closed.Load() {
			wait = 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		ok := e.committedPoint(ctx)
		cancel()
		if !ok {
			e.log.Debug("checkpoint skipped: written records not yet committed",
				"last", e.clog.LastIndex(), "committed", e.CommitIndex())
			return nil
		}
	}
	captured := e.clog.End()
	// Every entry of a record before pos is flushed and counted in its
	// queue's state when the states are captured below (flushMu).
	e.flushMu.Lock()
	flushLocked := true
	defer func() {
		if flushLocked {
			e.flushMu.Unlock()
		}
	}()
	if err := e.flushIndexes(1); err != nil {
		return err
	}
	e.clog.Sync()
	if e.clog.Synced() < captured {
		return fmt.Errorf("checkpoint: log not synced to %d", captured)
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
	ids := make([]model.QueueID, len(list))
	bytes := make([]queueindex.SegmentBytes, len(list))
	for i, q := range list {
		qs[i].State, bytes[i] = q.idx.StateWithBytes()
		ids[i] = qs[i].ID
	}
	e.flushMu.Unlock()
	flushLocked = false
	sections[bytesSection] = encodeQueueBytes(ids, bytes)
	epochs := make([][]EpochStart, len(list))
	for i, q := range list {
		epochs[i] = q.epochs.snapshot()
	}
	sections[epochsSection] = encodeEpochs(ids, epochs)
	sections[pinsSection] = encodePins(ids, list)
	sections[keeperPinsSection] = e.encodeKeeperPins()
	sections[nextIndexSection] = binary.LittleEndian.AppendUint64(nil, uint64(next))
	// Every local copy is synced before an entry points at it, and copies
	// are appended under ckptMu: the local tail is durable here.
	e.local.Sync()
	sections[localSection] = e.localTail()
	if err := e.keys.Sync(); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(e.cfg.Dir, checkpointName), encodeCheckpoint(checkpointData{LogPos: pos, Queues: qs, Sections: sections})); err != nil {
		return err
	}
	e.ckptPos.Store(int64(pos))
	e.ckptIndex, e.ckptSections = next, sections
	e.localCkpt.Store(int64(binary.LittleEndian.Uint64(sections[localSection])))
	e.clearInPlace()
	var errs []error
	for i, q := range list {
		errs = append(errs, q.idx.ReleaseFiles(qs[i].State.First))
	}
	if err := errors.Join(errs...); err != nil {
		e.log.Warn("deleting index files before the checkpointed start failed", "err", err)
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

// flushIndexes (flushMu held) writes the in-memory index tails of queues appended to since
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

// lastCheckpoint is the log position recovery starts from.
func (e *Engine) lastCheckpoint() model.LogPos { return model.LogPos(e.ckptPos.Load()) }

// AddCheckpointSection makes capture's snapshot a section of every later
// checkpoint. State kept above storage (the broker's state machines, which
// apply their internal queues up to the visible end) registers here: its
// snapshot names the queue offsets it reflects, and on open it reads its
// section with CheckpointSection and replays its queues from there.
func (e *Engine) AddCheckpointSection(name string, capture func() ([]byte, error)) {
	e.sectionMu.Lock()
	defer e.sectionMu.Unlock()
	if e.sectionProviders == nil {
		e.sectionProviders = map[string]func() ([]byte, error){}
	}
	e.sectionProviders[name] = capture
}

// CheckpointSection returns a section of the checkpoint the engine opened
// from (false when it has none).
func (e *Engine) CheckpointSection(name string) ([]byte, bool) {
	e.sectionMu.Lock()
	defer e.sectionMu.Unlock()
	b, ok := e.openedSections[name]
	return b, ok
}

// DropOpenedSections forgets the sections of the checkpoint the engine
// opened from, so state kept above storage rebuilds from the log alone (a
// replica that starts leading long after it opened), and the providers
// registered by state that is gone.
func (e *Engine) DropOpenedSections() {
	e.sectionMu.Lock()
	defer e.sectionMu.Unlock()
	e.openedSections = nil
	e.sectionProviders = nil
}
