package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// Keeper snapshots in the local area. A state keeper (idempotent producers,
// the transaction index) is rebuilt from the checkpoint and the log after
// it; a node rebuilt from its logs alone has no checkpoint, and once
// reclamation deleted segments their records are gone from the replay. So
// before reclamation deletes a segment that ends after the newest keeper
// snapshot, the last checkpoint's keeper sections are written to the local
// area (node-local, like the copies: a keeper's state is the same on every
// replica, but which segments a node has reclaimed is its own affair). The
// newest snapshot of each keeper is pinned. A rebuild restores it and
// replays the commit log from the checkpoint position it reflects.
//
// Record: a control record of queue 0 (no queue has id 0) in the local
// area, payload op | name length u16 | name | section; its Index holds the
// checkpoint position the section reflects (every record before it).

// opKeeperSnapshot is the control op of a keeper snapshot record.
const opKeeperSnapshot = 5

// engineQueue is the queue id of the engine's own control records.
const engineQueue model.QueueID = 0

// keeperSnapshots tracks the pinned snapshot record of each keeper, and
// during a rebuild the newest found.
type keeperSnapshots struct {
	mu   sync.Mutex
	pins map[string]keeperPin
	from model.LogPos // the position the newest snapshots reflect
	// found during a rebuild: name → section and the position it reflects
	found map[string]foundSnapshot
}

// keeperPin is a pinned snapshot record and the position it reflects.
type keeperPin struct {
	pin
	from model.LogPos
}

type foundSnapshot struct {
	from model.LogPos
	data []byte
}

// keeperSnapshotName splits a snapshot payload.
func keeperSnapshotName(payload []byte) (string, []byte, bool) {
	if len(payload) < 3 || payload[0] != opKeeperSnapshot {
		return "", nil, false
	}
	n := int(binary.LittleEndian.Uint16(payload[1:]))
	if len(payload) < 3+n {
		return "", nil, false
	}
	return string(payload[3 : 3+n]), payload[3+n:], true
}

// snapshotKeepers writes the last checkpoint's keeper sections to the
// local area when reclamation is about to delete commit-log segments
// ending after the position the newest snapshots reflect.
func (e *Engine) snapshotKeepers(ctx context.Context, deleting model.LogPos) error {
	if len(e.cfg.StateKeepers) == 0 {
		return nil
	}
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	ks := &e.keeperSnaps
	ks.mu.Lock()
	from := ks.from
	ks.mu.Unlock()
	if deleting <= from {
		return nil
	}
	at := e.lastCheckpoint()
	var recs []*commitlog.Entry
	for _, k := range e.cfg.StateKeepers {
		data := e.ckptSections[k.Name()]
		p := binary.LittleEndian.AppendUint16([]byte{opKeeperSnapshot}, uint16(len(k.Name())))
		p = append(append(p, k.Name()...), data...)
		if int64(len(p)) > e.cfg.SegmentSize/2 {
			e.log.Warn("keeper snapshot too large for the local area; a rebuild from the logs alone would lose it", "keeper", k.Name(), "bytes", len(p))
			continue
		}
		recs = append(recs, &commitlog.Entry{Format: model.FormatInternal, Flags: commitlog.FlagControl, Queue: engineQueue, Count: 1, Payload: p})
	}
	origins := make([]model.LogPos, len(recs))
	terms := make([]model.Term, len(recs))
	for i := range recs {
		origins[i], terms[i] = at, e.clog.CurrentTerm()
	}
	end, err := e.local.Append(recs, &localCopies{origins: origins, terms: terms})
	if err != nil {
		return fmt.Errorf("keeper snapshots: %w", err)
	}
	if err := e.local.SyncTo(ctx, end); err != nil {
		return err
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.pins == nil {
		ks.pins = map[string]keeperPin{}
	}
	for _, r := range recs {
		name, _, _ := keeperSnapshotName(r.Payload)
		ks.pins[name] = keeperPin{pin{r.Pos, r.Size}, at}
	}
	ks.from = at
	return nil
}

// keeperSnapshotRecord notes a snapshot record met by recovery (pos may be
// a copy of it): the pin follows it, and a rebuild keeps the newest.
func (e *Engine) keeperSnapshotRecord(payload []byte, from, pos model.LogPos, size uint32) {
	name, data, ok := keeperSnapshotName(payload)
	if !ok {
		return
	}
	ks := &e.keeperSnaps
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.pins == nil {
		ks.pins = map[string]keeperPin{}
	}
	// A newer snapshot, or a later copy of the pinned one.
	if p, ok := ks.pins[name]; !ok || from > p.from || from == p.from && pos > p.pos {
		ks.pins[name] = keeperPin{pin{pos, size}, from}
	}
	ks.from = max(ks.from, from)
	if ks.found != nil {
		if f, ok := ks.found[name]; !ok || from >= f.from {
			ks.found[name] = foundSnapshot{from, append([]byte(nil), data...)}
		}
	}
}

// keeperPinned reports whether the snapshot record at pos is pinned.
func (e *Engine) keeperPinned(payload []byte, pos model.LogPos) bool {
	name, _, ok := keeperSnapshotName(payload)
	if !ok {
		return false
	}
	ks := &e.keeperSnaps
	ks.mu.Lock()
	defer ks.mu.Unlock()
	p, ok := ks.pins[name]
	return ok && p.pos == pos
}

// moveKeeperPin repins a snapshot record copied by garbage collection.
func (e *Engine) moveKeeperPin(payload []byte, from, to model.LogPos, size uint32) bool {
	name, _, ok := keeperSnapshotName(payload)
	if !ok {
		return false
	}
	ks := &e.keeperSnaps
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if p, ok := ks.pins[name]; ok && p.pos == from {
		ks.pins[name] = keeperPin{pin{to, size}, p.from}
		return true
	}
	return false
}

// keeperPinBytes adds the pinned snapshot records to live.
func (e *Engine) keeperPinBytes(live map[model.LogPos]int64) {
	ks := &e.keeperSnaps
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, p := range ks.pins {
		live[e.segmentBase(p.pos)] += int64(p.size)
	}
}

// restoreFoundSnapshots ends a rebuild: each keeper with a snapshot record
// restores it and replays the commit log from the position it reflects.
func (e *Engine) restoreFoundSnapshots() error {
	ks := &e.keeperSnaps
	ks.mu.Lock()
	found := ks.found
	ks.found = nil
	ks.mu.Unlock()
	var keepers []StateKeeper
	from := model.LogPos(-1)
	for _, k := range e.cfg.StateKeepers {
		f, ok := found[k.Name()]
		if !ok {
			continue
		}
		if err := k.Restore(f.data); err != nil {
			return fmt.Errorf("restore %s from its snapshot record: %w", k.Name(), err)
		}
		keepers = append(keepers, k)
		if from < 0 || f.from < from {
			from = f.from
		}
	}
	if len(keepers) == 0 {
		return nil
	}
	return e.clog.Scan(from, func(pos model.LogPos, r *commitlog.Record) error {
		if r.Flags&(commitlog.FlagControl|commitlog.FlagCompacted|commitlog.FlagRelocated) != 0 {
			return nil
		}
		for _, k := range keepers {
			if pos >= found[k.Name()].from {
				k.Replay(pos, r)
			}
		}
		return nil
	})
}

// keeperPinsSection names the checkpoint section of the snapshot pins.
const keeperPinsSection = "storage.keeper-pins"

// encodeKeeperPins: from i64, count u16, then per keeper: name length u16,
// name, pos i64, size u32, from i64.
func (e *Engine) encodeKeeperPins() []byte {
	ks := &e.keeperSnaps
	ks.mu.Lock()
	defer ks.mu.Unlock()
	b := binary.LittleEndian.AppendUint64(nil, uint64(ks.from))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(ks.pins)))
	for name, p := range ks.pins {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
		b = append(b, name...)
		b = binary.LittleEndian.AppendUint64(b, uint64(p.pos))
		b = binary.LittleEndian.AppendUint32(b, p.size)
		b = binary.LittleEndian.AppendUint64(b, uint64(p.from))
	}
	return b
}

// restoreKeeperPins loads the section.
func (e *Engine) restoreKeeperPins(b []byte) {
	if len(b) < 10 {
		return
	}
	ks := &e.keeperSnaps
	ks.from = model.LogPos(binary.LittleEndian.Uint64(b))
	n := int(binary.LittleEndian.Uint16(b[8:]))
	b = b[10:]
	ks.pins = map[string]keeperPin{}
	for range n {
		if len(b) < 2 {
			return
		}
		l := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+l+20 {
			return
		}
		ks.pins[string(b[2:2+l])] = keeperPin{pin{model.LogPos(binary.LittleEndian.Uint64(b[2+l:])), binary.LittleEndian.Uint32(b[10+l:])},
			model.LogPos(binary.LittleEndian.Uint64(b[14+l:]))}
		b = b[22+l:]
	}
}
