package broker

import (
	"context"
	"log/slog"
	"sync"
	"time"

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
// __consumer_offsets): every change is a record in the queue of its group
// (offsetsPartition), and the committed offsets are what applying those
// queues in order gives (queueApplier), at run time after each record is
// visible and on restart from the checkpoint's section on. Snapshot records
// in the queues themselves (offsets_snapshot.go) let old records go while the
// log alone still rebuilds the state.
type offsetStore struct {
	engine  *storage.Engine
	meta    meta.Store // read once, to migrate snapshots of older versions
	queues  []model.QueueID
	log     *slog.Logger
	now     func() time.Time
	applier *queueApplier

	// changeMu is held shared by every writer from its append until the
	// append returns, and exclusively by a snapshot, so no record lands
	// between the state a snapshot encodes and the snapshot.
	changeMu sync.RWMutex

	mu     sync.Mutex // guards the fields below; taken inside applier.mu
	groups map[string]map[model.QueueID]Committed
	// per queue: records applied since its last snapshot, when that was,
	// and the parts of a snapshot being applied
	since    []int
	lastSnap []time.Time
	parts    []map[string]map[model.QueueID]Committed
}

func newOffsetStore(e *storage.Engine, m meta.Store, queues []model.QueueID, log *slog.Logger, now func() time.Time) *offsetStore {
	s := &offsetStore{engine: e, meta: m, queues: queues, log: log, now: now,
		groups: map[string]map[model.QueueID]Committed{},
		since:  make([]int, len(queues)), lastSnap: make([]time.Time, len(queues)),
		parts: make([]map[string]map[model.QueueID]Committed, len(queues))}
	for i := range s.lastSnap {
		s.lastSnap[i] = now()
	}
	s.applier = newQueueApplier(e, queues, s.applyRecord)
	return s
}

// partition returns the index of a group's queue.
func (s *offsetStore) partition(group string) int { return offsetsPartition(group, len(s.queues)) }

// applyRecord applies one record of queue i (applier.mu held).
func (s *offsetStore) applyRecord(i int, at model.QueueOffset, payload []byte) {
	if len(payload) > 0 && payload[0] == opSnapshot {
		last, groups, err := decodeSnapshotPart(payload)
		if err != nil {
			s.log.Error("skipping bad offsets snapshot part", "queue", s.queues[i], "offset", at, "err", err)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.parts[i] == nil {
			s.parts[i] = map[string]map[model.QueueID]Committed{}
		}
		for g, offs := range groups {
			if s.partition(g) == i {
				s.parts[i][g] = offs
			}
		}
		if last {
			for g := range s.groups {
				if s.partition(g) == i {
					delete(s.groups, g)
				}
			}
			for g, offs := range s.parts[i] {
				s.groups[g] = offs
			}
			s.parts[i], s.since[i], s.lastSnap[i] = nil, 0, s.now()
		}
		return
	}
	op, group, commits, now, err := decodeOffsetRecord(payload)
	if err != nil {
		s.log.Error("skipping bad offset record", "queue", s.queues[i], "offset", at, "err", err)
		return
	}
	if s.partition(group) != i {
		return // written by a version that kept every group in one queue (migrated)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since[i]++
	s.applyLocked(op, group, commits, now)
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

// write appends one record to the group's queue and applies what is
// visible (with the durability wait, the record itself).
func (s *offsetStore) write(ctx context.Context, op byte, group string, commits []OffsetCommit, now int64, opts storage.AppendOptions) error {
	i := s.partition(group)
	s.changeMu.RLock()
	r := &storage.Record{Queue: s.queues[i], Format: model.FormatInternal, Count: 1, Payload: encodeOffsetRecord(op, group, commits, now)}
	err := s.engine.AppendWith(ctx, []*storage.Record{r}, opts)
	s.changeMu.RUnlock()
	if err != nil || opts.NoWait || opts.Deferred {
		return err // the applier's loop applies it once visible
	}
	return s.applier.catchUp(i)
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
