package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/task"
)

// Record is one record to append (re-exported so front-ends need not import
// storage).
type Record = storage.Record

// Key is a key a record is indexed by; see storage.Key.
type Key = storage.Key

// ReadResult holds read records; Release it when their bytes are sent.
type ReadResult = storage.ReadResult

// StoredRecord is one record as stored.
type StoredRecord = storage.StoredRecord

// ReadOptions bound a read.
type ReadOptions = storage.ReadOptions

// AppendOptions modify an append.
type AppendOptions = storage.AppendOptions

// WriteTicket is storage.WriteTicket.
type WriteTicket = storage.WriteTicket

// FlagPayloadOffset marks a payload that starts with its own big-endian base
// offset (a Kafka record batch); storage writes the assigned offset there.
const FlagPayloadOffset = commitlog.FlagPayloadOffset

// Options configure a Broker.
type Options struct {
	// TraceAll traces every topic's messages (otherwise only topics whose
	// MessageTrace config is "true"); TraceSample (0 or 1: all) the share
	// of their messages traced; TraceRetention how long events are kept
	// (three days when zero). See trace.go.
	TraceAll       bool
	TraceSample    float64
	TraceRetention time.Duration

	MaxQueuesPerTopic      int
	DefaultQueues          int
	AutoCreateTopics       bool
	OffsetSnapshotInterval time.Duration
	RetentionInterval      time.Duration
	// CompactionInterval is how often compacted topics are checked for
	// queues due a cleaning (15 s when zero).
	CompactionInterval time.Duration
	// DelayLevels are the delays of RocketMQ delay levels 1, 2, ...
	// (DefaultDelayLevels when empty).
	DelayLevels []time.Duration
	// Retention is how long a topic keeps messages unless its
	// retention.ms says otherwise (0: forever); RetentionBytes the most a
	// queue keeps unless retention.bytes says otherwise (0: no limit).
	// Internal topics follow only their own settings.
	Retention      time.Duration
	RetentionBytes int64
	// MaxTimerDelay is the longest a timer message may wait (40 days when
	// zero).
	MaxTimerDelay time.Duration
	// TxnTimeout is how old a RocketMQ half message is before the broker
	// asks its producer group (6 s when zero); TxnCheckInterval spaces the
	// checks of one message (30 s); after TxnCheckMax checks (15) it is
	// discarded.
	TxnTimeout       time.Duration
	TxnCheckInterval time.Duration
	TxnCheckMax      int
	// KafkaTxns is the index of open and aborted Kafka transactions per
	// queue (a storage state keeper the composition root registers); nil:
	// an empty one, in memory.
	KafkaTxns *producers.TxnIndex
	// CheckTopicCreate, when set, may refuse a user topic before it is
	// created (tenant and namespace topic quotas); TopicCreated is told of
	// each one made.
	CheckTopicCreate func(model.TopicName) error
	TopicCreated     func(model.TopicName)
	// Router locates queues (default: this node leads every queue).
	Router route.Resolver
	// Elsewhere reaches the groups queues moved to (nil: a single node).
	Elsewhere Elsewhere
	// Placement names the replication group this broker serves when a
	// cluster spreads topics' queues over several: the broker sees each
	// topic as the group's queues, numbered from 0 (one RocketMQ broker),
	// and makes topics with that many queues in every group. Zero: one
	// group holds every queue.
	Placement route.Placement
	// MakeGroups, in a cluster, returns the replication groups of factor
	// voters, adding some when there are none (a topic asking for a
	// factor no group has yet).
	MakeGroups func(ctx context.Context, factor int) ([]model.GroupID, error)
	Logger     *slog.Logger
	Now        func() time.Time
}

// DefaultOptions returns the broker defaults.
func DefaultOptions() Options {
	return Options{
		MaxQueuesPerTopic:      10000,
		DefaultQueues:          8,
		AutoCreateTopics:       true,
		OffsetSnapshotInterval: 30 * time.Second,
		RetentionInterval:      30 * time.Second,
	}
}

// Broker is the domain core shared by every front-end.
type Broker struct {
	opts   Options
	log    *slog.Logger
	engine *storage.Engine
	meta   meta.Store
	trace  *tracer // message trace recorder (trace.go)

	topicMu sync.RWMutex // guards topics and byQueue; held across topic changes
	topics  map[model.TopicName]*Topic
	byID    map[[16]byte]*Topic
	byQueue map[model.QueueID]QueueRef

	topicsVersion atomic.Uint64

	offsets *offsetStore
	// groupImages: the group coordinator's persisted state (groupstate.go).
	groupImages *groupImages
	groupCfg    groupConfigs
	dynCfg      dynamicConfigs
	reqModes    requestModes
	compaction  compactState
	timers      *timerWheel
	halves      *halfStore
	batches     *kbatch.Reader // looks into Kafka batches (exact time lookups)

	stateLogsMu sync.Mutex // guards stateLogs
	stateLogs   []*StateLog

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// offsetsTopic is the internal topic that holds consumer offset commits.
var offsetsTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "consumer_offsets"}

// New builds the broker over an open engine and metadata store, loads topics
// and offsets, and starts its background work.
func New(ctx context.Context, engine *storage.Engine, store meta.Store, opts Options) (*Broker, error) {
	d := DefaultOptions()
	if opts.MaxQueuesPerTopic <= 0 {
		opts.MaxQueuesPerTopic = d.MaxQueuesPerTopic
	}
	if opts.DefaultQueues <= 0 {
		opts.DefaultQueues = d.DefaultQueues
	}
	if opts.OffsetSnapshotInterval <= 0 {
		opts.OffsetSnapshotInterval = d.OffsetSnapshotInterval
	}
	if opts.RetentionInterval <= 0 {
		opts.RetentionInterval = d.RetentionInterval
	}
	if opts.CompactionInterval <= 0 {
		opts.CompactionInterval = 15 * time.Second
	}
	if len(opts.DelayLevels) == 0 {
		opts.DelayLevels = DefaultDelayLevels
	}
	if opts.MaxTimerDelay <= 0 {
		opts.MaxTimerDelay = 40 * 24 * time.Hour
	}
	if opts.TxnTimeout <= 0 {
		opts.TxnTimeout = 6 * time.Second
	}
	if opts.TxnCheckInterval <= 0 {
		opts.TxnCheckInterval = 30 * time.Second
	}
	if opts.TxnCheckMax <= 0 {
		opts.TxnCheckMax = 15
	}
	if opts.KafkaTxns == nil {
		opts.KafkaTxns = producers.NewTxnIndex()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Router == nil {
		opts.Router = route.Local{Node: engine.Identity().NodeID, Epoch: engine.LeaderEpoch}
	}
	b := &Broker{
		opts:       opts,
		log:        opts.Logger.With("component", "broker"),
		engine:     engine,
		meta:       store,
		topics:     map[model.TopicName]*Topic{},
		byID:       map[[16]byte]*Topic{},
		byQueue:    map[model.QueueID]QueueRef{},
		batches:    kbatch.NewReader(maxDecompressedBatch),
		compaction: compactState{cleaned: map[model.QueueID]model.QueueOffset{}},
	}
	opts.KafkaTxns.SetStartOffsets(func(q model.QueueID) (model.QueueOffset, bool) {
		start, _, _, err := engine.Offsets(q)
		return start, err == nil
	})
	topicsRev, err := b.loadTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("load topics: %w", err)
	}
	if err := b.loadRequestModes(ctx); err != nil {
		return nil, fmt.Errorf("load request modes: %w", err)
	}
	groupConfigsRev, err := b.loadGroupConfigs(ctx)
	if err != nil {
		return nil, fmt.Errorf("load group configs: %w", err)
	}
	configsRev, err := b.loadBrokerConfigs(ctx)
	if err != nil {
		return nil, fmt.Errorf("load dynamic broker configs: %w", err)
	}
	t, err := b.internalTopic(ctx, offsetsTopic, offsetsPartitions)
	if err != nil {
		return nil, fmt.Errorf("offsets topic: %w", err)
	}
	b.offsets = newOffsetStore(b, store, t.Queues)
	if err := b.offsets.load(ctx); err != nil {
		return nil, fmt.Errorf("load offsets: %w", err)
	}
	bctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.offsets.state.Run(bctx, opts.OffsetSnapshotInterval)
	}()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.watchBrokerConfigs(bctx, configsRev)
	}()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.watchGroupConfigs(bctx, groupConfigsRev)
	}()
	if opts.Placement.Several() {
		// The brokers of the other groups create, grow and delete topics too.
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.watchTopics(bctx, topicsRev)
		}()
	}
	if err := b.startGroupImages(ctx, bctx); err != nil {
		cancel()
		b.wg.Wait()
		return nil, err
	}
	b.every(bctx, pullCommitFlush, "pull-offsets", b.flushPulled)
	b.every(bctx, opts.RetentionInterval, "topic-retention", b.enforceTopicRetention)
	b.every(bctx, opts.CompactionInterval, "compaction", b.compactTopics)
	if err := b.startTrace(ctx, bctx); err != nil {
		cancel()
		b.wg.Wait()
		return nil, fmt.Errorf("trace topic: %w", err)
	}
	if err := b.startDelays(ctx, bctx); err != nil {
		cancel()
		b.wg.Wait()
		return nil, err
	}
	if err := b.startTimers(ctx, bctx); err != nil {
		cancel()
		b.wg.Wait()
		return nil, err
	}
	if err := b.startHalfStore(ctx, bctx); err != nil {
		cancel()
		b.wg.Wait()
		return nil, err
	}
	// Uploads wait for this (TierConfig.AwaitFilter): which topics opted
	// out of tiering.
	engine.SetTierFilter(b.queueTiered)
	return b, nil
}

func (b *Broker) every(ctx context.Context, d time.Duration, name string, fn func(context.Context) error) {
	task.Every(ctx, &b.wg, d, fn, func(err error) { b.log.Error("background task failed", "task", name, "err", err) })
}

// Close stops background work. The engine and the metadata store belong to
// the caller (the engine's last checkpoint holds the state machines'
// sections).
func (b *Broker) Close() error {
	b.engine.SetTierFilter(nil)
	b.cancel()
	b.wg.Wait()
	// Offsets pulls carried are written while the engine is still open
	// (a member no longer leading cannot: they are forgotten).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := b.flushPulled(ctx); err != nil {
		b.log.Debug("offsets carried by pulls not written at close", "err", err)
	}
	return nil
}

// internalTopic returns an internal topic kept forever (its own trims
// free it) with at least n queues.
func (b *Broker) internalTopic(ctx context.Context, name model.TopicName, n int) (*Topic, error) {
	return b.EnsureInternalTopic(ctx, name, n, TopicConfig{RetentionMs: -1})
}

// OffsetsTopic is the internal topic holding consumer offset commits (Kafka
// clients know it as __consumer_offsets).
func (b *Broker) OffsetsTopic() *Topic {
	t, _ := b.Topic(offsetsTopic)
	return t
}

// KafkaTxns is the index of open and aborted Kafka transactions per queue.
func (b *Broker) KafkaTxns() *producers.TxnIndex { return b.opts.KafkaTxns }

// LastStable returns a queue's last stable offset (below any open Kafka
// transaction) given its high watermark.
func (b *Broker) LastStable(id model.QueueID, hw model.QueueOffset) model.QueueOffset {
	return b.opts.KafkaTxns.LastStable(id, hw)
}

// Meta is the metadata store (for components that keep their own keys, such
// as producer id allocation).
func (b *Broker) Meta() meta.Store { return b.meta }

// ReadQueue reads a queue by storage id (for state rebuilt from the log).
func (b *Broker) ReadQueue(id model.QueueID, offset model.QueueOffset, opts ReadOptions) (*ReadResult, error) {
	return b.engine.Read(id, offset, opts)
}

// QueueOffsets returns a queue's start offset and high watermark by id.
func (b *Broker) QueueOffsets(id model.QueueID) (start, hw model.QueueOffset, err error) {
	start, hw, _, _, err = b.queueOffsets(id)
	return start, hw, err
}

// DefaultQueues is the queue count of auto-created topics.
func (b *Broker) DefaultQueues() int { return b.opts.DefaultQueues }

// AutoCreateTopics says whether unknown topics are created on first use.
func (b *Broker) AutoCreateTopics() bool { return b.opts.AutoCreateTopics }

// DataDir is the storage directory.
func (b *Broker) DataDir() string { return b.engine.Config().Dir }

// DiskSpace returns the data disk's total and free bytes.
func (b *Broker) DiskSpace() (total, free int64, err error) {
	u, err := b.engine.DiskUsage()
	return u.Total, u.Free, err
}

// Engine exposes the storage engine (for admin and metrics).
func (b *Broker) Engine() *storage.Engine { return b.engine }

// Placement is the share of every topic's queues this broker serves.
func (b *Broker) Placement() route.Placement { return b.opts.Placement }

// EnsureTopic returns a topic, creating it with the default queue count when
// auto-creation is on.
func (b *Broker) EnsureTopic(ctx context.Context, name model.TopicName) (*Topic, error) {
	return b.EnsureTopicWith(ctx, name, 0)
}

// EnsureTopicWith is EnsureTopic creating at most queues queues (0: the
// default count): a RocketMQ producer's route promised it that many, and it
// keeps hashing keys over them after its route refreshes.
func (b *Broker) EnsureTopicWith(ctx context.Context, name model.TopicName, queues int) (*Topic, error) {
	t, err := b.Topic(name)
	if err == nil || !errors.Is(err, model.ErrUnknownTopic) || !b.opts.AutoCreateTopics {
		return t, err
	}
	n := b.opts.DefaultQueues
	if queues > 0 {
		n = min(n, queues)
	}
	return b.GetOrCreateTopic(ctx, name, n, TopicConfig{})
}

// EnsureWholeTopic is EnsureTopic creating the default queue count over
// all replication groups (a Kafka topic's partitions).
func (b *Broker) EnsureWholeTopic(ctx context.Context, name model.TopicName) (*Topic, error) {
	return b.EnsureWholeTopicWith(ctx, name, b.opts.DefaultQueues)
}

// EnsureWholeTopicWith is EnsureWholeTopic creating n queues in all (a
// Pulsar topic made by its first producer or consumer: one queue, a
// non-partitioned topic, however many groups there are).
func (b *Broker) EnsureWholeTopicWith(ctx context.Context, name model.TopicName, n int) (*Topic, error) {
	t, err := b.Topic(name)
	if err == nil || !errors.Is(err, model.ErrUnknownTopic) || !b.opts.AutoCreateTopics {
		return t, err
	}
	t, err = b.CreateWholeTopic(ctx, name, n, TopicConfig{})
	if errors.Is(err, model.ErrTopicExists) {
		return b.Topic(name)
	}
	return t, err
}

// GetOrCreateTopic returns a topic, creating it with n queues and cfg when
// missing, whatever the auto-creation setting (the broker's own topics:
// retry, dead-letter, reply); a concurrent creation is not an error. The
// one get-or-create every protocol uses.
func (b *Broker) GetOrCreateTopic(ctx context.Context, name model.TopicName, n int, cfg TopicConfig) (*Topic, error) {
	t, err := b.Topic(name)
	if !errors.Is(err, model.ErrUnknownTopic) {
		return t, err
	}
	t, err = b.CreateTopic(ctx, name, n, cfg)
	if errors.Is(err, model.ErrTopicExists) {
		return b.Topic(name)
	}
	return t, err
}

// Append writes records to queue index of a topic. Each record's Queue is set
// from the topic; offsets come back in the records.
func (b *Broker) Append(ctx context.Context, name model.TopicName, index int32, recs []*storage.Record, opts storage.AppendOptions) error {
	id, t, err := b.appendQueue(name, index)
	if err != nil && !errors.Is(err, model.ErrQueueMoved) {
		return err
	}
	for _, r := range recs {
		r.Queue = id
		if err := topicLimit(t, r); err != nil {
			return err
		}
	}
	if err != nil {
		return b.appendElsewhere(ctx, t, index, recs, opts)
	}
	return b.engine.AppendWith(ctx, recs, opts)
}

// appendQueue is the storage queue of queue index of a topic, when this
// broker may append to it.
func (b *Broker) appendQueue(name model.TopicName, index int32) (model.QueueID, *Topic, error) {
	id, t, err := b.QueueID(name, index)
	if err != nil {
		return 0, nil, err
	}
	if t.Away(index) {
		return id, t, model.ErrQueueMoved // (unformatted: forwarded appends pass here every time)
	}
	if err := route.Check(id, b.opts.Router.Locate(id)); err != nil {
		return 0, nil, err
	}
	return id, t, nil
}

// topicLimit refuses a record larger than its topic's max.message.bytes.
func topicLimit(t *Topic, r *storage.Record) error {
	if max := t.Config.MaxMessageBytes; max > 0 && len(r.Payload) > int(max) {
		return fmt.Errorf("%w: %d bytes, topic limit %d", model.ErrMessageTooLarge, len(r.Payload), max)
	}
	return nil
}

// WaitDurable waits until records ending at or before end are durable under
// the storage durability policy (a Kafka acks=all produce waits here); tk
// is the Ticket taken before they were written.
func (b *Broker) WaitDurable(ctx context.Context, end model.LogPos, tk WriteTicket) error {
	return b.engine.WaitDurable(ctx, end, tk)
}

// Ticket marks the replication state before an append whose durability
// is waited for later (storage.Engine.Ticket).
func (b *Broker) Ticket() WriteTicket { return b.engine.Ticket() }

// WrittenEnd is the end of everything written so far: waiting until it is
// durable covers every record written before (a retried duplicate's
// original among them).
func (b *Broker) WrittenEnd() model.LogPos { return b.engine.WrittenEnd() }

// AppendMessages encodes messages in the neutral format and appends them,
// one record each, returning their offsets.
func (b *Broker) AppendMessages(ctx context.Context, name model.TopicName, index int32, msgs []model.Message) ([]model.QueueOffset, error) {
	recs := make([]*storage.Record, len(msgs))
	slab := make([]storage.Record, len(msgs))
	now := b.opts.Now().UnixMilli()
	for i := range msgs {
		messageRecord(&slab[i], &msgs[i], now)
		recs[i] = &slab[i]
	}
	if err := b.Append(ctx, name, index, recs, storage.AppendOptions{}); err != nil {
		return nil, err
	}
	offs := make([]model.QueueOffset, len(recs))
	for i, r := range recs {
		offs[i] = r.BaseOffset
	}
	return offs, nil
}

// MessageRecord is m in the neutral format as a record for queue q, with
// its keys and tag hash.
func (b *Broker) MessageRecord(q model.QueueID, m *model.Message) *storage.Record {
	r := &storage.Record{}
	messageRecord(r, m, b.opts.Now().UnixMilli())
	r.Queue = q
	return r
}

// EnsureInternalTopic returns an internal topic with at least n queues,
// creating it with cfg or growing it (for state kept in the log by other
// components).
func (b *Broker) EnsureInternalTopic(ctx context.Context, name model.TopicName, n int, cfg TopicConfig) (*Topic, error) {
	t, err := b.Topic(name)
	if errors.Is(err, model.ErrUnknownTopic) {
		t, err = b.createTopic(ctx, name, n, cfg, true, false)
		if errors.Is(err, model.ErrTopicExists) { // made by another group's broker
			t, err = b.Topic(name)
		}
	}
	if err != nil || len(t.Queues) >= n {
		return t, err
	}
	return b.growTopic(ctx, name, n, true, false) // older versions made some with fewer
}

// KeyHit is a candidate location of a message stored with a key.
type KeyHit struct {
	Queue     model.QueueID
	Offset    model.QueueOffset
	StoreTime int64
}

// LookupKey returns candidate locations of messages stored with key, newest
// first, stored between from and to (ms; to <= 0: no bound). Candidates
// share the key's hash: callers read them and compare.
func (b *Broker) LookupKey(key []byte, max int, from, to int64) []KeyHit {
	hits := b.engine.LookupKey(key, max, from, to)
	out := make([]KeyHit, 0, len(hits))
	seen := make(map[KeyHit]bool, len(hits))
	for _, h := range hits {
		// A record garbage collection moved is in the key index twice.
		k := KeyHit{Queue: h.Queue, Offset: h.Offset, StoreTime: h.StoreTime}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// TagHash is the filter hash stored with a record's tag.
func TagHash(tag string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(tag); i++ {
		h ^= uint64(tag[i])
		h *= 1099511628211
	}
	return h
}

// Read reads stored records of a topic's queue; see storage.Engine.Read.
func (b *Broker) Read(name model.TopicName, index int32, offset model.QueueOffset, opts storage.ReadOptions) (*storage.ReadResult, error) {
	id, t, err := b.QueueID(name, index)
	if err != nil {
		return nil, err
	}
	if err := route.Check(id, b.opts.Router.Locate(id)); err != nil {
		return nil, err
	}
	if t.Away(index) {
		return b.readQueue(id, offset, opts)
	}
	return b.engine.Read(id, offset, opts)
}

// Tiered says whether the engine keeps history in an object store.
func (b *Broker) Tiered() bool { return b.engine.Tiered() }

// Prefetch starts reading queue id's record at offset from the object
// store when it lives only there (storage.Engine.Prefetch).
func (b *Broker) Prefetch(id model.QueueID, offset model.QueueOffset) { b.engine.Prefetch(id, offset) }

// Offsets returns a queue's start offset, high watermark and log end offset.
func (b *Broker) Offsets(name model.TopicName, index int32) (start, hw, end model.QueueOffset, err error) {
	id, t, err := b.QueueID(name, index)
	if err != nil {
		return 0, 0, 0, err
	}
	if t.Away(index) { // its ends are where its records are now
		start, hw, end, _, err = b.queueOffsets(id)
		return start, hw, end, err
	}
	return b.engine.Offsets(id)
}

// SetStartOffset deletes a queue's records before offset (Kafka
// DeleteRecords); it returns the new start offset.
func (b *Broker) SetStartOffset(name model.TopicName, index int32, offset model.QueueOffset) (model.QueueOffset, error) {
	id, _, err := b.QueueID(name, index)
	if err != nil {
		return 0, err
	}
	if err := b.engine.SetStartOffset(id, offset); err != nil {
		return 0, err
	}
	start, _, _, err := b.engine.Offsets(id)
	return start, err
}

// PollTopic is the receive-wait (long poll) every protocol's consumers use:
// it calls try until try reports a result or an error, ctx ends or d passes,
// parking between calls until a queue of t gets messages (and at least
// every second, since deadlines of messages in flight pass without new
// data). It reports whether try produced a result.
func (b *Broker) PollTopic(ctx context.Context, t *Topic, d time.Duration, try func() (bool, error)) (bool, error) {
	until := time.Now().Add(d)
	for {
		if ok, err := try(); ok || err != nil {
			return ok, err
		}
		wait := time.Until(until)
		if wait <= 0 || ctx.Err() != nil {
			return false, nil
		}
		b.WaitTopic(ctx, t, min(wait, time.Second))
	}
}

// WaitTopic parks until a queue of t gets messages past its current high
// watermark (below the last stable offset), or d passes, or ctx ends.
func (b *Broker) WaitTopic(ctx context.Context, t *Topic, d time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	watches := make([]Watch, 0, len(t.Queues))
	for i := range t.Queues {
		_, hw, _, err := b.Offsets(t.Name, int32(i))
		if err != nil {
			return
		}
		watches = append(watches, Watch{Topic: t.Name, Index: int32(i), Offset: hw, Stable: true})
	}
	_ = b.Wait(wctx, watches)
}

// enforceTopicRetention moves queue start offsets past messages older than
// their topic's retention and past what exceeds its retention bytes; the
// engine then reclaims segments nothing retains.
func (b *Broker) enforceTopicRetention(ctx context.Context) error {
	now := b.opts.Now().UnixMilli()
	var errs []error
	starts := map[model.QueueID]model.QueueOffset{}
	for _, t := range b.Topics(true) {
		ms, bytes := b.EffectiveRetention(t)
		if ms < 0 && bytes < 0 {
			continue
		}
		for _, id := range t.Queues {
			var start model.QueueOffset
			var err error
			if ms >= 0 {
				start, err = b.engine.OffsetForTime(id, now-ms)
			}
			if err == nil && bytes >= 0 {
				var keep model.QueueOffset
				keep, err = b.engine.StartKeeping(id, bytes)
				start = max(start, keep)
			}
			if err != nil && !errors.Is(err, model.ErrUnknownQueue) {
				errs = append(errs, err)
			}
			if err == nil && start > 0 {
				starts[id] = start
			}
		}
	}
	// One log write and one fsync for every queue whose start moves.
	errs = append(errs, b.engine.SetStartOffsets(ctx, starts))
	return errors.Join(errs...)
}

// EffectiveRetention is a topic's retention in milliseconds and bytes per
// queue, -1 meaning unlimited: its own retention.ms / retention.bytes when
// set, else the broker's defaults (user topics only); none for topics
// whose cleanup policy is compact alone.
func (b *Broker) EffectiveRetention(t *Topic) (ms, bytes int64) {
	ms, bytes = -1, -1
	if !t.Config.Deletes() {
		return ms, bytes // cleanup.policy=compact: compaction alone bounds it
	}
	retention, retentionBytes := b.retentionDefaults()
	switch {
	case t.Config.RetentionMs != 0:
		ms = max(t.Config.RetentionMs, -1)
	case !t.Internal && retention > 0:
		ms = retention.Milliseconds()
	}
	switch {
	case t.Config.RetentionBytes != 0:
		bytes = max(t.Config.RetentionBytes, -1)
	case !t.Internal && retentionBytes > 0:
		bytes = retentionBytes
	}
	return ms, bytes
}

// RetentionDefaults are the broker's default retention in milliseconds and
// bytes per queue (-1: unlimited), as Kafka describes them.
func (b *Broker) RetentionDefaults() (ms, bytes int64) {
	ms, bytes = -1, -1
	retention, retentionBytes := b.retentionDefaults()
	if retention > 0 {
		ms = retention.Milliseconds()
	}
	if retentionBytes > 0 {
		bytes = retentionBytes
	}
	return ms, bytes
}

// TopicBytes returns the size of a topic's retained records, in total and
// per queue (the queue-index accounting; a queue gone meanwhile counts 0).
func (b *Broker) TopicBytes(t *Topic) (int64, []int64) {
	per := make([]int64, len(t.Queues))
	var total int64
	for i, id := range t.Queues {
		if n, err := b.engine.QueueBytes(id); err == nil {
			per[i] = n
			total += n
		}
	}
	return total, per
}

// RunRetention applies every topic's retention now and lets the engine
// reclaim what nothing retains (what the periodic passes do).
func (b *Broker) RunRetention(ctx context.Context) (storage.RetentionResult, error) {
	err := b.enforceTopicRetention(ctx)
	res, rerr := b.engine.EnforceRetention()
	return res, errors.Join(err, rerr)
}

// Now is the broker's clock (injected through Options.Now): front-ends take
// message times (LogAppendTime, timer due times, store timestamps) from it,
// so tests of time-driven behaviour can run on a fake clock.
func (b *Broker) Now() time.Time { return b.opts.Now() }
