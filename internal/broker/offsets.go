package broker

import (
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"sort"
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
}

// OffsetCommit is one offset to commit.
type OffsetCommit struct {
	Queue       model.QueueID
	Offset      model.QueueOffset
	Metadata    string
	LeaderEpoch model.Epoch // -1 when unknown
}

// offsetStore keeps committed offsets as a state machine over the consumer
// offsets queues (system/internal/consumer_offsets, Kafka's
// __consumer_offsets), kept by a StateLog: every change is a record in the
// queue of its group (KeyPartition), and the committed offsets are what
// applying those queues in order gives.
type offsetStore struct {
	meta  meta.Store // read once, to migrate snapshots of older versions
	log   *slog.Logger
	state *StateLog

	mu     sync.Mutex // guards groups
	groups map[string]map[model.QueueID]Committed
	n      int // queue count
	// pulled: offsets pulls carried, not yet written (pullcommits.go).
	pulled pullCommits
}

func newOffsetStore(b *Broker, m meta.Store, queues []model.QueueID) *offsetStore {
	s := &offsetStore{meta: m, log: b.log, groups: map[string]map[model.QueueID]Committed{}, n: len(queues)}
	s.state = b.NewStateLog(offsetsSection, queues, s)
	return s
}

// partition returns the index of a group's queue.
func (s *offsetStore) partition(group string) int { return KeyPartition(group, s.n) }

// Apply implements StateMachine: one commit or deletion record.
func (s *offsetStore) Apply(i int, at model.QueueOffset, payload []byte) {
	op, group, commits, now, err := decodeOffsetRecord(payload)
	if err != nil {
		s.log.Error("skipping bad offset record", "queue_index", i, "offset", at, "err", err)
		return
	}
	if s.partition(group) != i {
		return // written by a version that kept every group in one queue (migrated)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyLocked(op, group, commits, now)
}

// Entries implements StateMachine: one entry per group of queue i
// (group len u16 | group | group snapshot), by group name.
func (s *offsetStore) Entries(i int) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for g := range s.groups {
		if s.partition(g) == i {
			names = append(names, g)
		}
	}
	sort.Strings(names)
	out := make([][]byte, len(names))
	for j, g := range names {
		b := binary.LittleEndian.AppendUint16(nil, uint16(len(g)))
		out[j] = append(append(b, g...), encodeGroupSnapshot(s.groups[g])...)
	}
	return out
}

// Restore implements StateMachine.
func (s *offsetStore) Restore(i int, entries [][]byte) error {
	groups := make(map[string]map[model.QueueID]Committed, len(entries))
	for _, e := range entries {
		r := &msgReader{b: e}
		name := string(r.take(r.u16()))
		if r.err != nil {
			return r.err
		}
		g, err := decodeGroupSnapshot(r.b)
		if err != nil {
			return err
		}
		groups[name] = g
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for g := range s.groups {
		if s.partition(g) == i {
			delete(s.groups, g)
		}
	}
	for g, offs := range groups {
		if s.partition(g) == i {
			s.groups[g] = offs
		}
	}
	return nil
}

// Len implements StateMachine.
func (s *offsetStore) Len(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for g, offs := range s.groups {
		if s.partition(g) == i {
			n += len(offs)
		}
	}
	return n
}

func (s *offsetStore) applyLocked(op byte, group string, commits []OffsetCommit, now int64) {
	if op == opDeleteGroup {
		delete(s.groups, group)
		return
	}
	g := s.groups[group]
	if op == opDeleteOffsets {
		for _, c := range commits {
			delete(g, c.Queue)
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
		g[c.Queue] = Committed{Offset: c.Offset, Metadata: c.Metadata, CommitTime: now, LeaderEpoch: c.LeaderEpoch}
	}
}

// write appends one record to the group's queue; it takes effect once
// visible (with the durability wait, before write returns). Offsets pulls
// carried for its queues and not yet written are dropped: it supersedes
// them.
func (s *offsetStore) write(ctx context.Context, op byte, group string, commits []OffsetCommit, now int64, opts storage.AppendOptions) error {
	if op == opDeleteGroup {
		s.pulled.drop(group, nil)
	} else {
		queues := make([]model.QueueID, len(commits))
		for i, c := range commits {
			queues[i] = c.Queue
		}
		s.pulled.drop(group, queues)
	}
	return s.writeRecord(ctx, op, group, commits, now, opts)
}

// writeRecord appends one record to the group's queue.
func (s *offsetStore) writeRecord(ctx context.Context, op byte, group string, commits []OffsetCommit, now int64, opts storage.AppendOptions) error {
	r := &storage.Record{Format: model.FormatInternal, Count: 1, Payload: encodeOffsetRecord(op, group, commits, now)}
	return s.state.Write(ctx, s.partition(group), []*storage.Record{r}, nil, opts)
}

// fetch returns a group's offsets, those pulls carried lately included.
func (s *offsetStore) fetch(group string) map[model.QueueID]Committed {
	s.mu.Lock()
	out := make(map[model.QueueID]Committed, len(s.groups[group]))
	for q, c := range s.groups[group] {
		out[q] = c
	}
	s.mu.Unlock()
	return s.pulled.overlay(group, out)
}

func (s *offsetStore) groupNames() []string {
	s.mu.Lock()
	out := make([]string, 0, len(s.groups))
	for g := range s.groups {
		out = append(out, g)
	}
	s.mu.Unlock()
	for _, g := range s.pulled.groups() {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// CommitOffsets durably records a group's offsets for queues of a topic.
func (b *Broker) CommitOffsets(ctx context.Context, group string, name model.TopicName, offsets map[int32]OffsetCommit) error {
	return b.commitOffsets(ctx, group, name, offsets, storage.AppendOptions{})
}

// CommitOffsetsNoWait records a group's offsets and returns once they are
// written, without waiting for the durability policy (for commits nobody is
// told about, such as RocketMQ's one-way updates): they take effect when
// the record is visible (at once in async mode, at the next fsync in sync
// mode).
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
	return b.offsets.write(ctx, opCommitEpochs, group, commits, b.opts.Now().UnixMilli(), opts)
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
	return b.offsets.write(ctx, opDeleteGroup, group, nil, b.opts.Now().UnixMilli(), storage.AppendOptions{})
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
	return b.offsets.write(ctx, opDeleteOffsets, group, commits, b.opts.Now().UnixMilli(), storage.AppendOptions{})
}

// OffsetGroups lists the groups with committed offsets.
func (b *Broker) OffsetGroups() []string { return b.offsets.groupNames() }

// CommitQueueOffsets durably records a group's offsets by queue id (each
// commit's Queue), for queues of any replication group: a Kafka group's
// coordinator keeps the group's offsets for the whole of every topic.
func (b *Broker) CommitQueueOffsets(ctx context.Context, group string, commits []OffsetCommit) error {
	return b.offsets.write(ctx, opCommitEpochs, group, commits, b.opts.Now().UnixMilli(), storage.AppendOptions{})
}

// GroupQueueOffsets returns a group's committed offsets by queue id.
func (b *Broker) GroupQueueOffsets(group string) map[model.QueueID]Committed {
	return b.offsets.fetch(group)
}

// DeleteQueueOffsets forgets a group's offsets of some queues.
func (b *Broker) DeleteQueueOffsets(ctx context.Context, group string, queues []model.QueueID) error {
	commits := make([]OffsetCommit, len(queues))
	for i, q := range queues {
		commits[i] = OffsetCommit{Queue: q}
	}
	return b.offsets.write(ctx, opDeleteOffsets, group, commits, b.opts.Now().UnixMilli(), storage.AppendOptions{})
}
