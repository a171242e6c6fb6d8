package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Committed is a consumer group's committed position in one queue.
type Committed struct {
	Offset     model.QueueOffset
	Metadata   string
	CommitTime int64
	// LeaderEpoch is the leader epoch of the message before Offset as the
	// consumer saw it (Kafka's committed leader epoch; -1 when unknown).
	LeaderEpoch model.Epoch
	// recordOffset is the offset of the internal record that set it; a
	// commit only replaces an older one, so concurrent commits settle in log
	// order exactly as a replay would.
	recordOffset model.QueueOffset
}

// OffsetCommit is one offset to commit.
type OffsetCommit struct {
	Queue       model.QueueID
	Offset      model.QueueOffset
	Metadata    string
	LeaderEpoch model.Epoch // -1 when unknown
}

const (
	opCommit        = 1
	opDeleteGroup   = 2
	opDeleteOffsets = 3
	// opCommitEpochs is opCommit whose commits carry their leader epoch
	// (an i32 after the metadata); the only commit op written now.
	opCommitEpochs = 4

	offsetsGroupPrefix = "offsets/groups/"
	offsetsAppliedKey  = "offsets/applied"
)

// offsetStore keeps committed offsets. Every change is a record in the
// internal offsets queue (durable under the engine's policy, cheap because it
// shares the log's group commit); the in-memory map serves reads. A periodic
// snapshot to the metadata store lets the queue's old records be reclaimed,
// and start-up replays the queue from the snapshot on.
type offsetStore struct {
	engine *storage.Engine
	meta   meta.Store
	queue  model.QueueID
	log    *slog.Logger

	// changeMu is held shared by every commit from append to apply, and
	// exclusively by a snapshot, so a snapshot never misses a commit whose
	// record lies below its position.
	changeMu sync.RWMutex

	mu      sync.Mutex
	groups  map[string]map[model.QueueID]Committed
	dirty   map[string]bool
	applied model.QueueOffset
}

func newOffsetStore(e *storage.Engine, m meta.Store, q model.QueueID, log *slog.Logger) *offsetStore {
	return &offsetStore{engine: e, meta: m, queue: q, log: log, groups: map[string]map[model.QueueID]Committed{}, dirty: map[string]bool{}}
}

func encodeOffsetRecord(op byte, group string, commits []OffsetCommit, now int64) []byte {
	le := binary.LittleEndian
	b := []byte{op}
	b = le.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	b = le.AppendUint64(b, uint64(now))
	b = le.AppendUint32(b, uint32(len(commits)))
	for _, c := range commits {
		b = le.AppendUint32(b, uint32(c.Queue))
		b = le.AppendUint64(b, uint64(c.Offset))
		b = le.AppendUint16(b, uint16(len(c.Metadata)))
		b = append(b, c.Metadata...)
		if op == opCommitEpochs {
			b = le.AppendUint32(b, uint32(c.LeaderEpoch))
		}
	}
	return b
}

// decodeOffsetRecord parses a record of the offsets queue.
func decodeOffsetRecord(b []byte) (op byte, group string, commits []OffsetCommit, now int64, err error) {
	r := &msgReader{b: b}
	if v := r.take(1); v != nil {
		op = v[0]
	}
	group = string(r.take(r.u16()))
	if t := r.take(8); t != nil {
		now = int64(binary.LittleEndian.Uint64(t))
	}
	n := int(r.u32())
	if n > len(b) {
		return 0, "", nil, 0, fmt.Errorf("%w: %d commits in %d bytes", model.ErrCorruptRecord, n, len(b))
	}
	for i := 0; i < n && r.err == nil; i++ {
		var c OffsetCommit
		c.Queue = model.QueueID(r.u32())
		if v := r.take(8); v != nil {
			c.Offset = model.QueueOffset(binary.LittleEndian.Uint64(v))
		}
		c.Metadata = string(r.take(r.u16()))
		c.LeaderEpoch = -1
		if op == opCommitEpochs {
			c.LeaderEpoch = model.Epoch(r.u32())
		}
		commits = append(commits, c)
	}
	if op == opCommitEpochs {
		op = opCommit
	} else if r.err == nil && (op != opCommit && op != opDeleteGroup && op != opDeleteOffsets) {
		r.err = fmt.Errorf("%w: offset record op %d", model.ErrCorruptRecord, op)
	}
	return op, group, commits, now, r.err
}

// Commit durably records offsets for a group.
func (s *offsetStore) commit(ctx context.Context, group string, commits []OffsetCommit, now int64, opts storage.AppendOptions) error {
	return s.writeWith(ctx, opCommitEpochs, group, commits, now, opts)
}

func (s *offsetStore) write(ctx context.Context, op byte, group string, commits []OffsetCommit, now int64) error {
	return s.writeWith(ctx, op, group, commits, now, storage.AppendOptions{})
}

func (s *offsetStore) writeWith(ctx context.Context, op byte, group string, commits []OffsetCommit, now int64, opts storage.AppendOptions) error {
	s.changeMu.RLock()
	defer s.changeMu.RUnlock()
	r := &storage.Record{Queue: s.queue, Format: model.FormatInternal, Count: 1, Payload: encodeOffsetRecord(op, group, commits, now)}
	if err := s.engine.AppendWith(ctx, []*storage.Record{r}, opts); err != nil {
		return err
	}
	if op == opCommitEpochs {
		op = opCommit
	}
	s.mu.Lock()
	s.applyLocked(op, group, commits, now, r.BaseOffset)
	s.mu.Unlock()
	return nil
}

func (s *offsetStore) applyLocked(op byte, group string, commits []OffsetCommit, now int64, at model.QueueOffset) {
	s.dirty[group] = true
	if op == opDeleteGroup {
		delete(s.groups, group)
		return
	}
	g := s.groups[group]
	if op == opDeleteOffsets {
		for _, c := range commits {
			if old, ok := g[c.Queue]; ok && old.recordOffset < at {
				delete(g, c.Queue)
			}
		}
		if len(g) == 0 {
			delete(s.groups, group)
		}
		return
	}
	if g == nil {
		g = map[model.QueueID]Committed{}
		s.groups[group] = g
	}
	for _, c := range commits {
		if old, ok := g[c.Queue]; ok && old.recordOffset > at {
			continue
		}
		g[c.Queue] = Committed{Offset: c.Offset, Metadata: c.Metadata, CommitTime: now, LeaderEpoch: c.LeaderEpoch, recordOffset: at}
	}
}

func (s *offsetStore) fetch(group string) map[model.QueueID]Committed {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[model.QueueID]Committed, len(s.groups[group]))
	for q, c := range s.groups[group] {
		out[q] = c
	}
	return out
}

func (s *offsetStore) groupNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.groups))
	for g := range s.groups {
		out = append(out, g)
	}
	return out
}

// load restores the snapshot and replays newer records.
func (s *offsetStore) load(ctx context.Context) error {
	if kv, err := s.meta.Get(ctx, offsetsAppliedKey); err == nil {
		n, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("offsets snapshot position: %w", err)
		}
		s.applied = model.QueueOffset(n)
	} else if !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	kvs, err := s.meta.List(ctx, offsetsGroupPrefix)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		g, err := decodeGroupSnapshot(kv.Value)
		if err != nil {
			return fmt.Errorf("offsets snapshot %s: %w", kv.Key, err)
		}
		s.groups[strings.TrimPrefix(kv.Key, offsetsGroupPrefix)] = g
	}
	start, _, _, err := s.engine.Offsets(s.queue)
	if err != nil {
		return err
	}
	off := max(s.applied, start)
	replayed := 0
	for {
		res, err := s.engine.Read(s.queue, off, storage.ReadOptions{MaxBytes: 1 << 20})
		if err != nil {
			return err
		}
		for _, rec := range res.Records {
			op, group, commits, now, err := decodeOffsetRecord(rec.Payload)
			if err != nil {
				s.log.Error("skipping bad offset record", "offset", rec.BaseOffset, "err", err)
				continue
			}
			s.applyLocked(op, group, commits, now, rec.BaseOffset)
			replayed++
		}
		next := res.NextOffset
		res.Release()
		if next == off {
			break
		}
		off = next
	}
	s.log.Info("consumer offsets loaded", "groups", len(s.groups), "replayed", replayed)
	return nil
}

// encodeGroupSnapshot lays out: n u32 | n × { queue u32 | offset i64 |
// commit time i64 | metadata len u16 | metadata } | n × leader epoch i32
// (the epochs follow the entries, in their order, so snapshots written
// before epochs were kept still decode, with epochs -1).
func encodeGroupSnapshot(g map[model.QueueID]Committed) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, uint32(len(g)))
	epochs := make([]model.Epoch, 0, len(g))
	for q, c := range g {
		b = le.AppendUint32(b, uint32(q))
		b = le.AppendUint64(b, uint64(c.Offset))
		b = le.AppendUint64(b, uint64(c.CommitTime))
		b = le.AppendUint16(b, uint16(len(c.Metadata)))
		b = append(b, c.Metadata...)
		epochs = append(epochs, c.LeaderEpoch)
	}
	for _, ep := range epochs {
		b = le.AppendUint32(b, uint32(ep))
	}
	return b
}

func decodeGroupSnapshot(b []byte) (map[model.QueueID]Committed, error) {
	r := &msgReader{b: b}
	n := int(r.u32())
	if n > len(b) {
		return nil, fmt.Errorf("%w: %d offsets in %d bytes", model.ErrCorruptRecord, n, len(b))
	}
	g := make(map[model.QueueID]Committed, n)
	order := make([]model.QueueID, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		q := model.QueueID(r.u32())
		var c Committed
		if v := r.take(8); v != nil {
			c.Offset = model.QueueOffset(binary.LittleEndian.Uint64(v))
		}
		if v := r.take(8); v != nil {
			c.CommitTime = int64(binary.LittleEndian.Uint64(v))
		}
		c.Metadata = string(r.take(r.u16()))
		c.recordOffset = -1
		c.LeaderEpoch = -1
		g[q] = c
		order = append(order, q)
	}
	if r.err == nil && len(r.b) == 4*len(order) {
		for _, q := range order {
			c := g[q]
			c.LeaderEpoch = model.Epoch(r.u32())
			g[q] = c
		}
	}
	return g, r.err
}

// snapshot writes the groups changed since the last snapshot to the metadata
// store and lets the offsets queue drop the records it covers.
func (s *offsetStore) snapshot(ctx context.Context) error {
	s.changeMu.Lock()
	_, hw, _, err := s.engine.Offsets(s.queue)
	if err != nil {
		s.changeMu.Unlock()
		return err
	}
	s.mu.Lock()
	if len(s.dirty) == 0 && hw == s.applied {
		s.mu.Unlock()
		s.changeMu.Unlock()
		return nil
	}
	ops := make([]meta.Op, 0, len(s.dirty)+1)
	for g := range s.dirty {
		if grp, ok := s.groups[g]; ok {
			ops = append(ops, meta.Op{Key: offsetsGroupPrefix + g, Value: encodeGroupSnapshot(grp)})
		} else {
			ops = append(ops, meta.Op{Key: offsetsGroupPrefix + g, Delete: true})
		}
	}
	s.dirty = map[string]bool{}
	s.mu.Unlock()
	s.changeMu.Unlock()
	ops = append(ops, meta.Op{Key: offsetsAppliedKey, Value: []byte(strconv.FormatInt(int64(hw), 10))})
	if _, err := s.meta.Txn(ctx, nil, ops); err != nil {
		return err
	}
	s.mu.Lock()
	s.applied = hw
	s.mu.Unlock()
	return s.engine.SetStartOffset(s.queue, hw)
}

// CommitOffsets durably records a group's offsets for queues of a topic.
func (b *Broker) CommitOffsets(ctx context.Context, group string, name model.TopicName, offsets map[int32]OffsetCommit) error {
	return b.commitOffsets(ctx, group, name, offsets, storage.AppendOptions{})
}

// CommitOffsetsNoWait records a group's offsets and returns once they are
// written and visible, without waiting for the durability policy (for
// commits nobody is told about, such as RocketMQ's one-way updates).
func (b *Broker) CommitOffsetsNoWait(ctx context.Context, group string, name model.TopicName, offsets map[int32]OffsetCommit) error {
	return b.commitOffsets(ctx, group, name, offsets, storage.AppendOptions{NoWait: true})
}

func (b *Broker) commitOffsets(ctx context.Context, group string, name model.TopicName, offsets map[int32]OffsetCommit, opts storage.AppendOptions) error {
	commits := make([]OffsetCommit, 0, len(offsets))
	for idx, c := range offsets {
		id, _, err := b.QueueID(name, idx)
		if err != nil {
			return err
		}
		c.Queue = id
		commits = append(commits, c)
	}
	return b.offsets.commit(ctx, group, commits, b.opts.Now().UnixMilli(), opts)
}

// FetchOffsets returns a group's committed offsets for a topic, by queue
// index. Queues without a commit are absent.
func (b *Broker) FetchOffsets(group string, name model.TopicName) (map[int32]Committed, error) {
	t, err := b.Topic(name)
	if err != nil {
		return nil, err
	}
	all := b.offsets.fetch(group)
	out := map[int32]Committed{}
	for i, id := range t.Queues {
		if c, ok := all[id]; ok {
			out[int32(i)] = c
		}
	}
	return out, nil
}

// DeleteGroupOffsets forgets every offset of a group.
func (b *Broker) DeleteGroupOffsets(ctx context.Context, group string) error {
	return b.offsets.write(ctx, opDeleteGroup, group, nil, b.opts.Now().UnixMilli())
}

// FetchAllOffsets returns every committed offset of a group, by topic and
// queue index.
func (b *Broker) FetchAllOffsets(group string) map[*Topic]map[int32]Committed {
	all := b.offsets.fetch(group)
	out := map[*Topic]map[int32]Committed{}
	b.topicMu.RLock()
	defer b.topicMu.RUnlock()
	for id, c := range all {
		ref, ok := b.byQueue[id]
		if !ok {
			continue
		}
		t := b.topics[ref.Topic.Name]
		if out[t] == nil {
			out[t] = map[int32]Committed{}
		}
		out[t][ref.Index] = c
	}
	return out
}

// DeleteOffsets forgets a group's offsets for some queues of a topic.
func (b *Broker) DeleteOffsets(ctx context.Context, group string, name model.TopicName, indexes []int32) error {
	var commits []OffsetCommit
	for _, idx := range indexes {
		id, _, err := b.QueueID(name, idx)
		if err != nil {
			return err
		}
		commits = append(commits, OffsetCommit{Queue: id})
	}
	return b.offsets.write(ctx, opDeleteOffsets, group, commits, b.opts.Now().UnixMilli())
}

// OffsetGroups lists the groups with committed offsets.
func (b *Broker) OffsetGroups() []string { return b.offsets.groupNames() }
