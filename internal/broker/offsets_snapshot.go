package broker

import (
	"context"
	"fmt"
	"strings"

	"github.com/rosettamq/rosetta/internal/model"
)

// offsetsSection names the consumer offsets' checkpoint section.
const offsetsSection = "broker.consumer-offsets"

// Keys of the snapshots older versions kept in the metadata store, read
// once to migrate them into the log.
const (
	legacyOffsetsGroupPrefix = "offsets/groups/"
	legacyOffsetsAppliedKey  = "offsets/applied"
)

// load restores the state: from the checkpoint's section and the records
// after it, or from the queues alone; a snapshot older versions left in
// the metadata store is migrated into the queues.
func (s *offsetStore) load(ctx context.Context) error {
	migrated, err := s.loadLegacy(ctx)
	if err != nil {
		return err
	}
	restored, err := s.state.Load()
	if err != nil {
		return err
	}
	if migrated {
		if err := s.state.FinishMigration(ctx, s.meta, legacyOffsetsAppliedKey, legacyOffsetsGroupPrefix); err != nil {
			return err
		}
	}
	s.mu.Lock()
	n := len(s.groups)
	s.mu.Unlock()
	s.log.Info("consumer offsets loaded", "groups", n, "from_checkpoint", restored, "migrated", migrated)
	return nil
}

// loadLegacy reads the snapshot older versions kept in the metadata store,
// with the records of their single queue (queue 0) after it, as the state
// the queues are then applied on (false when there is none). A checkpoint
// written since has the state already: its section replaces this.
func (s *offsetStore) loadLegacy(ctx context.Context) (bool, error) {
	applied, kvs, found, err := LegacySnapshot(ctx, s.meta, legacyOffsetsAppliedKey, legacyOffsetsGroupPrefix)
	if !found || err != nil {
		return false, err
	}
	for _, kv := range kvs {
		g, err := decodeGroupSnapshot(kv.Value)
		if err != nil {
			return false, fmt.Errorf("offsets snapshot %s: %w", kv.Key, err)
		}
		s.groups[strings.TrimPrefix(kv.Key, legacyOffsetsGroupPrefix)] = g
	}
	// Queue 0's records after the snapshot hold commits of every group, in
	// log order.
	a := s.state.applier
	old := newQueueApplier(a.engine, a.queues[:1], func(_ int, _ model.QueueOffset, payload []byte) {
		if op, group, commits, now, err := decodeOffsetRecord(payload); err == nil {
			s.mu.Lock()
			s.applyLocked(op, group, commits, now)
			s.mu.Unlock()
		}
	})
	old.next[0] = applied
	if err := old.catchUp(0); err != nil {
		return false, err
	}
	s.state.SkipTo(0, old.next[0])
	return true, nil
}
