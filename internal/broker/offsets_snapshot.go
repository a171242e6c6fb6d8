package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// offsetsSection names the consumer offsets' checkpoint section:
// n u32 | n × next offset i64 | a snapshot part (encodeSnapshotPart) of
// every group, the state as of those offsets.
const offsetsSection = "broker.consumer-offsets"

// Keys of the snapshots older versions kept in the metadata store, read
// once to migrate them into the log.
const (
	legacyOffsetsGroupPrefix = "offsets/groups/"
	legacyOffsetsAppliedKey  = "offsets/applied"
)

// Snapshot cadence: a queue gets a snapshot record (and its older records
// can go) once it has applied as many records since its last one as its
// state has entries (so snapshots cost no more than the log they free), at
// least snapshotMinRecords, or any number after snapshotMaxAge.
const (
	snapshotMinRecords = 100
	snapshotMaxAge     = 10 * time.Minute
	snapshotPartBytes  = 1 << 20
)

// load restores the state: from the checkpoint's section and the records
// after it, or from the queues alone; a snapshot older versions left in
// the metadata store is migrated into the queues.
func (s *offsetStore) load(ctx context.Context) error {
	s.applier.mu.Lock()
	restored := s.restoreSection()
	migrated, err := s.loadLegacy(ctx, restored)
	s.applier.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.applier.catchUpAll(); err != nil {
		return err
	}
	if migrated {
		if err := s.snapshotAll(ctx, true); err != nil {
			return fmt.Errorf("migrate offsets snapshot: %w", err)
		}
		ops := []meta.Op{{Key: legacyOffsetsAppliedKey, Delete: true}}
		if kvs, err := s.meta.List(ctx, legacyOffsetsGroupPrefix); err == nil {
			for _, kv := range kvs {
				ops = append(ops, meta.Op{Key: kv.Key, Delete: true})
			}
		}
		if _, err := s.meta.Txn(ctx, nil, ops); err != nil {
			return fmt.Errorf("remove migrated offsets snapshot: %w", err)
		}
	}
	s.engine.AddCheckpointSection(offsetsSection, s.capture)
	s.mu.Lock()
	n := len(s.groups)
	s.mu.Unlock()
	s.log.Info("consumer offsets loaded", "groups", n, "from_checkpoint", restored, "migrated", migrated)
	return nil
}

// restoreSection loads the checkpoint's section (applier.mu held).
func (s *offsetStore) restoreSection() bool {
	data, ok := s.engine.CheckpointSection(offsetsSection)
	if !ok {
		return false
	}
	le := binary.LittleEndian
	if len(data) < 4 || int(le.Uint32(data)) != len(s.queues) || len(data) < 4+8*len(s.queues) {
		s.log.Warn("consumer offsets checkpoint section does not fit; replaying the queues")
		return false
	}
	next := make([]model.QueueOffset, len(s.queues))
	for i := range next {
		next[i] = model.QueueOffset(le.Uint64(data[4+8*i:]))
	}
	_, groups, err := decodeSnapshotPart(data[4+8*len(s.queues):])
	if err != nil {
		s.log.Warn("consumer offsets checkpoint section unreadable; replaying the queues", "err", err)
		return false
	}
	s.groups = groups
	copy(s.applier.next, next)
	return true
}

// capture is the checkpoint section: the state exactly as of the applied
// offsets.
func (s *offsetStore) capture() ([]byte, error) {
	s.applier.mu.Lock()
	defer s.applier.mu.Unlock()
	le := binary.LittleEndian
	b := le.AppendUint32(nil, uint32(len(s.queues)))
	for _, n := range s.applier.next {
		b = le.AppendUint64(b, uint64(n))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.groups))
	for g := range s.groups {
		names = append(names, g)
	}
	return append(b, encodeSnapshotPart(true, names, s.groups)...), nil
}

// loadLegacy reads the snapshot versions before 0.x kept in the metadata
// store, with the records of their single queue after it (applier.mu held;
// false when there is none or the checkpoint already has the state).
func (s *offsetStore) loadLegacy(ctx context.Context, restored bool) (bool, error) {
	kv, err := s.meta.Get(ctx, legacyOffsetsAppliedKey)
	if errors.Is(err, meta.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if restored {
		return true, nil // a checkpoint after the migration began already has it
	}
	applied, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return false, fmt.Errorf("offsets snapshot position: %w", err)
	}
	kvs, err := s.meta.List(ctx, legacyOffsetsGroupPrefix)
	if err != nil {
		return false, err
	}
	for _, kv := range kvs {
		g, err := decodeGroupSnapshot(kv.Value)
		if err != nil {
			return false, fmt.Errorf("offsets snapshot %s: %w", kv.Key, err)
		}
		s.groups[strings.TrimPrefix(kv.Key, legacyOffsetsGroupPrefix)] = g
	}
	// The old single queue is queue 0: its records after the snapshot hold
	// commits of every group, in log order.
	old := newQueueApplier(s.engine, s.queues[:1], func(_ int, at model.QueueOffset, payload []byte) {
		op, group, commits, now, err := decodeOffsetRecord(payload)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.applyLocked(op, group, commits, now)
		s.mu.Unlock()
	})
	old.next[0] = model.QueueOffset(applied)
	if err := old.catchUpLocked(0); err != nil {
		return false, err
	}
	s.applier.next[0] = old.next[0]
	return true, nil
}

// snapshotDue snapshots the queues whose cadence says so.
func (s *offsetStore) snapshotDue(ctx context.Context) error {
	return s.snapshotAll(ctx, false)
}

// snapshotAll writes a snapshot record into every queue that needs one (or
// every queue when force is set) and trims the records below it.
func (s *offsetStore) snapshotAll(ctx context.Context, force bool) error {
	var errs []error
	for i := range s.queues {
		s.mu.Lock()
		entries := 0
		for g, offs := range s.groups {
			if s.partition(g) == i {
				entries += len(offs)
			}
		}
		due := force || s.since[i] >= max(snapshotMinRecords, entries) ||
			s.since[i] > 0 && s.now().Sub(s.lastSnap[i]) >= snapshotMaxAge
		s.mu.Unlock()
		if due {
			errs = append(errs, s.snapshotQueue(ctx, i))
		}
	}
	return errors.Join(errs...)
}

// snapshotQueue appends a snapshot of queue i's groups, as of everything
// before it in the queue, and trims the queue to it.
func (s *offsetStore) snapshotQueue(ctx context.Context, i int) error {
	q := s.queues[i]
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	// No writer is appending: apply every record already written.
	for {
		_, _, end, err := s.engine.Offsets(q)
		if err != nil {
			return err
		}
		if err := s.applier.catchUp(i); err != nil {
			return err
		}
		s.applier.mu.Lock()
		next := s.applier.next[i]
		s.applier.mu.Unlock()
		if next >= end {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.engine.Wait(wctx, map[model.QueueID]model.QueueOffset{q: next})
		cancel()
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	var names []string
	for g := range s.groups {
		if s.partition(g) == i {
			names = append(names, g)
		}
	}
	sort.Strings(names)
	var recs []*storage.Record
	for len(names) > 0 || len(recs) == 0 {
		n, size := 0, 0
		for n < len(names) && (n == 0 || size < snapshotPartBytes) {
			size += 64 + len(names[n]) + 40*len(s.groups[names[n]])
			n++
		}
		recs = append(recs, &storage.Record{Queue: q, Format: model.FormatInternal, Count: 1,
			Payload: encodeSnapshotPart(n == len(names), names[:n], s.groups)})
		names = names[n:]
	}
	s.mu.Unlock()
	if err := s.engine.AppendWith(ctx, recs, storage.AppendOptions{}); err != nil {
		return err
	}
	if err := s.applier.catchUp(i); err != nil {
		return err
	}
	return s.engine.SetStartOffset(q, recs[0].BaseOffset)
}
