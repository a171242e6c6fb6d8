package broker

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// Message types a topic may be restricted to (RocketMQ 5 topic types).
const (
	MessageTypeNormal      = "normal"
	MessageTypeFIFO        = "fifo"
	MessageTypeDelay       = "delay"
	MessageTypeTransaction = "transaction"
	MessageTypeMixed       = "mixed"
)

// TopicConfig is the per-topic configuration. Zero values mean "broker
// default".
type TopicConfig struct {
	RetentionMs     int64  `json:"retention_ms,omitempty"`    // -1 keeps forever
	RetentionBytes  int64  `json:"retention_bytes,omitempty"` // per queue; -1 unlimited
	MaxMessageBytes int32  `json:"max_message_bytes,omitempty"`
	MessageType     string `json:"message_type,omitempty"`
	CleanupPolicy   string `json:"cleanup_policy,omitempty"` // delete | compact
	TimestampType   string `json:"timestamp_type,omitempty"` // CreateTime | LogAppendTime
	MessageTrace    string `json:"message_trace,omitempty"`  // "true": lifecycle events recorded (trace.go)
	RemoteStorage   string `json:"remote_storage,omitempty"` // "false": never tiered to the bucket (Kafka remote.storage.enable)
	// ReplicationFactor is how many copies the topic's queues keep in a
	// cluster: they live in replication groups of that many voters (0: the
	// cluster's factor).
	ReplicationFactor int               `json:"replication_factor,omitempty"`
	Extra             map[string]string `json:"extra,omitempty"` // other settings, kept verbatim
}

// Validate checks a topic configuration.
func (c TopicConfig) Validate() error {
	switch c.MessageType {
	case "", MessageTypeNormal, MessageTypeFIFO, MessageTypeDelay, MessageTypeTransaction, MessageTypeMixed:
	default:
		return fmt.Errorf("%w: message type %q", model.ErrInvalidConfig, c.MessageType)
	}
	switch c.CleanupPolicy {
	case "", "delete", "compact", "compact,delete", "delete,compact":
	default:
		return fmt.Errorf("%w: cleanup policy %q", model.ErrInvalidConfig, c.CleanupPolicy)
	}
	switch c.TimestampType {
	case "", "CreateTime", "LogAppendTime":
	default:
		return fmt.Errorf("%w: timestamp type %q", model.ErrInvalidConfig, c.TimestampType)
	}
	switch c.MessageTrace {
	case "", "true", "false":
	default:
		return fmt.Errorf("%w: message trace %q (true or false)", model.ErrInvalidConfig, c.MessageTrace)
	}
	switch c.RemoteStorage {
	case "", "true", "false":
	default:
		return fmt.Errorf("%w: remote storage %q (true or false)", model.ErrInvalidConfig, c.RemoteStorage)
	}
	if c.MaxMessageBytes < 0 {
		return fmt.Errorf("%w: max message bytes %d", model.ErrInvalidConfig, c.MaxMessageBytes)
	}
	switch c.ReplicationFactor {
	case 0, 1, 3, 5:
	default:
		return fmt.Errorf("%w: replication factor %d (1, 3 or 5: an even factor survives no more failures than the odd one below it)",
			model.ErrInvalidReplicationFactor, c.ReplicationFactor)
	}
	return nil
}

// Tiered reports whether the topic's records go to the bucket when the
// node tiers its log: every topic does unless its remote storage is
// "false" (an opt-out for data that must stay on the members' disks).
func (c TopicConfig) Tiered() bool { return c.RemoteStorage != "false" }

// Topic is a topic's metadata: its name, its queues (index i is Kafka
// partition i and RocketMQ queue id i) and its configuration. When a
// cluster spreads queues over several replication groups, Groups records
// the group of each queue (route.Table), Queues are the broker's own (its
// group's, numbered from 0: the RocketMQ queue ids under the group's broker
// name) and All every queue of the topic; with one group they are the same.
type Topic struct {
	Name     model.TopicName `json:"-"`
	FullName string          `json:"name"`
	Queues   []model.QueueID `json:"-"`
	All      []model.QueueID `json:"queues"`
	Groups   route.Table     `json:"groups,omitempty"`
	// Moves are the queues moved to other groups (route.Moves): Groups
	// keeps each queue's home — its RocketMQ broker name and queue id —
	// and a moved queue's appends go to its last piece's group, where
	// Kafka clients find it.
	Moves     route.Moves `json:"moves,omitempty"`
	Config    TopicConfig `json:"config"`
	CreatedMs int64       `json:"created_ms"`
	ID        [16]byte    `json:"id"` // stable UUID (Kafka topic id)
	Internal  bool        `json:"internal,omitempty"`
	// Guests are the broker's queues moved here from their home groups,
	// in topic order: a broker's queue index past its own Queues names
	// Guests[index-len(Queues)] (Queue).
	Guests   []model.QueueID `json:"-"`
	revision int64
	local    []int32 // each queue's index within its home group
	// away: the broker's own queues (by index) moved, or moving, to
	// another group: appends to them are refused.
	away map[int32]bool
	// pieces: storage queues of the topic in this broker's group that are
	// neither its own nor its guests — a moved queue's middle piece, or
	// one it is moving to — kept until the topic is deleted.
	pieces []model.QueueID
}

// GroupOf is the replication group queue i (Kafka partition i) takes
// appends in: its home, or the group it moved to.
func (t *Topic) GroupOf(i int) model.GroupID { return t.Moves.Current(t.Groups, i) }

// HomeOf is queue i's home group: the broker name RocketMQ clients know
// it under, also after it moved.
func (t *Topic) HomeOf(i int) model.GroupID { return t.Groups.Group(i) }

// HomeIndex is queue i's index at its home group's broker (HomeOf): its
// RocketMQ queue id under the home's broker name, also after it moved (-1
// for no such queue).
func (t *Topic) HomeIndex(i int) int {
	switch {
	case i < 0 || i >= len(t.All):
		return -1
	case len(t.local) == len(t.All):
		return int(t.local[i])
	}
	return int(t.Groups.Locals(len(t.All))[i])
}

// LocalIndex is queue i's index at the broker of the group it takes
// appends in (GroupOf): among that group's own queues, or past them among
// its guests (-1 for no such queue).
func (t *Topic) LocalIndex(i int) int {
	if i < 0 || i >= len(t.All) {
		return -1
	}
	g := t.GroupOf(i)
	if g != t.HomeOf(i) {
		guests := t.Moves.Guests(t.Groups, g)
		return t.CountIn(g) + slices.Index(guests, i)
	}
	if len(t.local) != len(t.All) {
		return int(t.Groups.Locals(len(t.All))[i])
	}
	return int(t.local[i])
}

// GlobalIndex is the topic-wide index of queue local at group g's broker
// (LocalIndex's inverse; -1 when the group holds fewer).
func (t *Topic) GlobalIndex(g model.GroupID, local int) int {
	if own := t.CountIn(g); local >= own {
		guests := t.Moves.Guests(t.Groups, g)
		if local-own < len(guests) {
			return guests[local-own]
		}
		return -1
	}
	return t.Groups.Global(g, local, len(t.All))
}

// Queue is the storage queue of the broker's queue index: one of its own
// Queues, or past them one of its Guests.
func (t *Topic) Queue(index int32) (model.QueueID, bool) {
	switch {
	case index < 0:
		return 0, false
	case int(index) < len(t.Queues):
		return t.Queues[index], true
	case int(index)-len(t.Queues) < len(t.Guests):
		return t.Guests[int(index)-len(t.Queues)], true
	}
	return 0, false
}

// Away reports whether the broker's own queue index moved, or is moving,
// to another group: it takes no appends here.
func (t *Topic) Away(index int32) bool { return t.away[index] }

// CountIn is how many of the topic's queues group g holds.
func (t *Topic) CountIn(g model.GroupID) int { return t.Groups.Count(g, len(t.All)) }

// spread is the groups a topic of factor copies places new queues in:
// the groups of that many voters, made (opts.MakeGroups) when the cluster
// has none yet; every group for a topic each group's broker keeps its own
// queues of (every: internal state, retry and dead-letter queues).
func (b *Broker) spread(ctx context.Context, factor int, every bool) ([]model.GroupID, error) {
	if every {
		factor = route.EveryGroup
	}
	if s := b.opts.Placement.NewQueues(factor); len(s) > 0 {
		return s, nil
	}
	if b.opts.MakeGroups == nil {
		return nil, fmt.Errorf("%w: no replication groups of %d voters", model.ErrInvalidReplicationFactor, factor)
	}
	return b.opts.MakeGroups(ctx, factor)
}

// GroupOwned reports whether a topic is one every group's broker keeps a
// queue of for its own use: a consumer group's retry or dead-letter topic.
func GroupOwned(name model.TopicName) bool {
	n := name.Short()
	return strings.HasPrefix(n, RetryTopicPrefix) || strings.HasPrefix(n, DeadLetterTopicPrefix)
}

// view fills in this broker's view of a stored topic: the table (a topic
// recorded before tables spreads as the cluster was made), each queue's
// index within its group and the broker's own queues.
func (b *Broker) view(t *Topic) {
	t.Groups = b.opts.Placement.TableOf(t.Groups, len(t.All))
	t.local = t.Groups.Locals(len(t.All))
	t.Queues = t.Groups.Select(b.opts.Placement.Group, t.All)
	t.Guests, t.away, t.pieces = nil, nil, nil
	if len(t.Moves) == 0 {
		return
	}
	g := b.opts.Placement.Group
	for _, i := range t.Moves.Guests(t.Groups, g) {
		t.Guests = append(t.Guests, t.All[i])
	}
	for _, mv := range t.Moves {
		for _, p := range mv.Pieces {
			if p.Group == g && t.Groups.Group(mv.Queue) != g && (t.Moves.Current(t.Groups, mv.Queue) != g || p.From == route.PieceMoving) {
				t.pieces = append(t.pieces, t.All[mv.Queue])
			}
		}
		if t.Groups.Group(mv.Queue) == g && (t.Moves.Current(t.Groups, mv.Queue) != g || t.Moves.Moving(mv.Queue)) {
			if t.away == nil {
				t.away = map[int32]bool{}
			}
			t.away[t.local[mv.Queue]] = true
		}
	}
}

// QueueCount is the number of queues.
func (t *Topic) QueueCount() int { return len(t.Queues) }

func topicKey(n model.TopicName) string { return "topics/" + n.String() }

const queueIDKey = "ids/queue"

// allocateQueueIDs reserves n fresh queue ids with a compare-and-swap on the
// counter key.
func (b *Broker) allocateQueueIDs(ctx context.Context, n int) ([]model.QueueID, error) {
	for {
		var next uint64 = 1
		var rev int64
		kv, err := b.meta.Get(ctx, queueIDKey)
		switch {
		case err == nil:
			if next, err = strconv.ParseUint(string(kv.Value), 10, 32); err != nil {
				return nil, fmt.Errorf("queue id counter: %w", err)
			}
			rev = kv.Revision
		case !errors.Is(err, meta.ErrNotFound):
			return nil, err
		}
		if next+uint64(n) >= 1<<32 {
			return nil, fmt.Errorf("%w: queue ids exhausted", model.ErrInvalidQueueCount)
		}
		_, err = b.meta.Txn(ctx, []meta.Compare{{Key: queueIDKey, Revision: rev}},
			[]meta.Op{{Key: queueIDKey, Value: []byte(strconv.FormatUint(next+uint64(n), 10))}})
		if errors.Is(err, meta.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ids := make([]model.QueueID, n)
		for i := range ids {
			ids[i] = model.QueueID(next + uint64(i))
		}
		return ids, nil
	}
}

// CreateTopic creates a topic with n queues in this broker's replication
// group (n in every group: a RocketMQ topic's queues per broker).
func (b *Broker) CreateTopic(ctx context.Context, name model.TopicName, n int, cfg TopicConfig) (*Topic, error) {
	return b.createTopic(ctx, name, n, cfg, false, false)
}

// CreateWholeTopic creates a topic of n queues in all, spread over the
// replication groups (a Kafka topic's partitions).
func (b *Broker) CreateWholeTopic(ctx context.Context, name model.TopicName, n int, cfg TopicConfig) (*Topic, error) {
	return b.createTopic(ctx, name, n, cfg, false, true)
}

func (b *Broker) createTopic(ctx context.Context, name model.TopicName, n int, cfg TopicConfig, internal, whole bool) (*Topic, error) {
	if n <= 0 || n > b.opts.MaxQueuesPerTopic && !internal { // the bound is for user topics
		return nil, fmt.Errorf("%w: %d queues (1..%d)", model.ErrInvalidQueueCount, n, b.opts.MaxQueuesPerTopic)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spread, err := b.spread(ctx, cfg.ReplicationFactor, internal || GroupOwned(name))
	if err != nil {
		return nil, err
	}
	total := n
	if !whole {
		total = n * len(spread) // n in every group
	}
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	if _, ok := b.topics[name]; ok {
		return nil, fmt.Errorf("%w: %s", model.ErrTopicExists, name)
	}
	if check := b.opts.CheckTopicCreate; check != nil && !internal {
		if err := check(name); err != nil {
			return nil, err
		}
	}
	ids, err := b.allocateQueueIDs(ctx, total)
	if err != nil {
		return nil, err
	}
	t := &Topic{Name: name, FullName: name.String(), All: ids, Groups: route.Table(nil).Extend(0, total, spread), Config: cfg,
		CreatedMs: b.opts.Now().UnixMilli(), Internal: internal}
	b.view(t)
	if err := b.engine.CreateQueues(ctx, t.Queues); err != nil {
		return nil, err
	}
	t.ID = newTopicID()
	if err := b.saveTopicLocked(ctx, t, 0); err != nil {
		// Another group's broker stored it first: take its version.
		b.dropQueues(ctx, t.Queues)
		if errors.Is(err, model.ErrTopicExists) {
			if aerr := b.adoptStoredLocked(ctx, name); aerr != nil {
				return nil, errors.Join(err, aerr)
			}
		}
		return nil, err
	}
	b.log.Info("topic created", "topic", name.String(), "queues", n)
	if created := b.opts.TopicCreated; created != nil && !internal {
		created(name)
	}
	return t, nil
}

// saveTopicLocked writes t if its stored revision is still rev.
func (b *Broker) saveTopicLocked(ctx context.Context, t *Topic, rev int64) error {
	v, err := json.Marshal(t)
	if err != nil {
		return err
	}
	nrev, err := b.meta.Txn(ctx, []meta.Compare{{Key: topicKey(t.Name), Revision: rev}}, []meta.Op{{Key: topicKey(t.Name), Value: v}})
	if errors.Is(err, meta.ErrConflict) {
		return fmt.Errorf("%w: %s", model.ErrTopicExists, t.Name)
	}
	if err != nil {
		return err
	}
	t.revision = nrev
	b.indexTopicLocked(t)
	b.topicsVersion.Add(1)
	return nil
}

// indexTopicLocked makes t the topic of its name, id and queues.
func (b *Broker) indexTopicLocked(t *Topic) {
	b.topics[t.Name] = t
	b.byID[t.ID] = t
	for i, id := range t.Queues {
		b.byQueue[id] = QueueRef{Topic: t, Index: int32(i)}
	}
	for i, id := range t.Guests {
		b.byQueue[id] = QueueRef{Topic: t, Index: int32(len(t.Queues) + i)}
	}
}

// newTopicID returns a random version-4 UUID.
func newTopicID() [16]byte {
	var id [16]byte
	_, _ = rand.Read(id[:])
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// TopicByID returns a topic by its id.
func (b *Broker) TopicByID(id [16]byte) (*Topic, error) {
	b.topicMu.RLock()
	defer b.topicMu.RUnlock()
	t, ok := b.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: id %x", model.ErrUnknownTopic, id)
	}
	return t, nil
}

// QueueRef names one queue of a topic.
type QueueRef struct {
	Topic *Topic
	Index int32
}

// QueueByID returns the topic and index of a storage queue.
func (b *Broker) QueueByID(id model.QueueID) (QueueRef, error) {
	b.topicMu.RLock()
	defer b.topicMu.RUnlock()
	ref, ok := b.byQueue[id]
	if !ok {
		return QueueRef{}, fmt.Errorf("%w: queue %d", model.ErrUnknownQueue, id)
	}
	return ref, nil
}

// queueTiered says whether a queue's records go to the bucket: not when
// its topic opted out (TopicConfig.Tiered); queues the broker does not know
// (control records, deleted topics) go.
func (b *Broker) queueTiered(id model.QueueID) bool {
	ref, err := b.QueueByID(id)
	return err != nil || ref.Topic.Config.Tiered()
}

// Topic returns a topic by name.
func (b *Broker) Topic(name model.TopicName) (*Topic, error) {
	b.topicMu.RLock()
	defer b.topicMu.RUnlock()
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", model.ErrUnknownTopic, name)
	}
	return t, nil
}

// TopicsVersion changes whenever a topic is created, deleted or changed
// (consumer groups watch it to notice new and grown topics).
func (b *Broker) TopicsVersion() uint64 { return b.topicsVersion.Load() }

// Topics lists the topics (internal ones only when asked), sorted by name.
func (b *Broker) Topics(includeInternal bool) []*Topic {
	b.topicMu.RLock()
	out := make([]*Topic, 0, len(b.topics))
	for _, t := range b.topics {
		if includeInternal || !t.Internal {
			out = append(out, t)
		}
	}
	b.topicMu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].FullName < out[j].FullName })
	return out
}

// DeleteTopic deletes a topic and its queues.
func (b *Broker) DeleteTopic(ctx context.Context, name model.TopicName) error {
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	if _, ok := b.topics[name]; !ok {
		return fmt.Errorf("%w: %s", model.ErrUnknownTopic, name)
	}
	if _, err := b.meta.Txn(ctx, nil, []meta.Op{{Key: topicKey(name), Delete: true}}); err != nil {
		return err
	}
	b.forgetTopicLocked(ctx, name)
	b.log.Info("topic deleted", "topic", name.String())
	return nil
}

// GrowTopic raises a topic's queue count in this broker's replication
// group to n. Queue counts never shrink.
func (b *Broker) GrowTopic(ctx context.Context, name model.TopicName, n int) (*Topic, error) {
	return b.growTopic(ctx, name, n, false, false)
}

// GrowWholeTopic raises a topic's queue count over all replication groups
// to n (Kafka's CreatePartitions).
func (b *Broker) GrowWholeTopic(ctx context.Context, name model.TopicName, n int) (*Topic, error) {
	return b.growTopic(ctx, name, n, false, true)
}

func (b *Broker) growTopic(ctx context.Context, name model.TopicName, n int, internal, whole bool) (*Topic, error) {
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	for range 5 {
		t, err := b.growTopicLocked(ctx, name, n, internal, whole)
		if !errors.Is(err, model.ErrTopicExists) {
			return t, err
		}
		// Another group's broker changed it meanwhile: take its version.
		if err := b.adoptStoredLocked(ctx, name); err != nil {
			return nil, err
		}
		if t := b.topics[name]; t != nil && len(t.Queues) >= n && internal {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: %s changed while growing it", model.ErrTopicExists, name)
}

func (b *Broker) growTopicLocked(ctx context.Context, name model.TopicName, n int, internal, whole bool) (*Topic, error) {
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", model.ErrUnknownTopic, name)
	}
	have := len(t.Queues)
	if whole {
		have = len(t.All)
	}
	if n <= have || n > b.opts.MaxQueuesPerTopic && !internal {
		return nil, fmt.Errorf("%w: %s has %d queues, asked for %d", model.ErrInvalidQueueCount, name, have, n)
	}
	spread, err := b.spread(ctx, t.Config.ReplicationFactor, t.Internal || GroupOwned(name))
	if err != nil {
		return nil, err
	}
	var table route.Table
	added := n - len(t.All)
	if whole {
		table = t.Groups.Extend(len(t.All), added, spread)
	} else if table, added = t.Groups.ExtendGroup(len(t.All), n, b.opts.Placement.Group, spread); added == 0 {
		return nil, fmt.Errorf("%w: %s: this broker's group takes no new queues", model.ErrInvalidQueueCount, name)
	}
	ids, err := b.allocateQueueIDs(ctx, added)
	if err != nil {
		return nil, err
	}
	nt := *t
	nt.All = append(append([]model.QueueID(nil), t.All...), ids...)
	nt.Groups = table
	b.view(&nt)
	if err := b.engine.CreateQueues(ctx, nt.Queues[len(t.Queues):]); err != nil {
		return nil, err
	}
	if err := b.saveTopicLocked(ctx, &nt, t.revision); err != nil {
		b.dropQueues(ctx, nt.Queues[len(t.Queues):])
		return nil, err
	}
	return &nt, nil
}

// UpdateTopicConfig replaces a topic's configuration.
func (b *Broker) UpdateTopicConfig(ctx context.Context, name model.TopicName, cfg TopicConfig) (*Topic, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", model.ErrUnknownTopic, name)
	}
	nt := *t
	nt.Config = cfg
	if err := b.saveTopicLocked(ctx, &nt, t.revision); err != nil {
		return nil, err
	}
	return &nt, nil
}

// QueueID resolves a topic's queue index to its storage queue id.
func (b *Broker) QueueID(name model.TopicName, index int32) (model.QueueID, *Topic, error) {
	t, err := b.Topic(name)
	if err != nil {
		return 0, nil, err
	}
	id, ok := t.Queue(index)
	if !ok {
		return 0, t, fmt.Errorf("%w: %s queue %d of %d", model.ErrUnknownQueue, name, index, len(t.Queues))
	}
	return id, t, nil
}

// loadTopics reads every topic from the metadata store, and deletes storage
// queues that no topic owns (left by a crash in the middle of a create).
func (b *Broker) loadTopics(ctx context.Context) (int64, error) {
	kvs, rev, err := b.meta.ListRev(ctx, "topics/")
	if err != nil {
		return 0, err
	}
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	for _, kv := range kvs {
		t, err := b.decodeTopic(kv)
		if err != nil {
			return 0, fmt.Errorf("topic %s: %w", kv.Key, err)
		}
		if t.ID == ([16]byte{}) {
			t.ID = newTopicID()
		}
		b.indexTopicLocked(t)
		if err := b.engine.CreateQueues(ctx, t.Queues); err != nil {
			return 0, err
		}
	}
	kept := map[model.QueueID]bool{}
	for _, t := range b.topics {
		for _, id := range t.pieces {
			kept[id] = true
		}
	}
	for _, id := range b.engine.QueueIDs() {
		if _, ok := b.byQueue[id]; !ok && !kept[id] {
			b.log.Warn("deleting storage queue that no topic owns", "queue", id)
			if err := b.engine.DeleteQueue(ctx, id); err != nil {
				return 0, err
			}
		}
	}
	return rev, nil
}
