package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/keyindex"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
	"github.com/rosettamq/rosetta/internal/task"
)

// Durability is the engine's fsync policy.
type Durability = commitlog.SyncMode

// Durability policies.
const (
	DurabilityAsync = commitlog.SyncAsync
	DurabilitySync  = commitlog.SyncAlways
)

// Faults injects commit-log I/O errors (tests).
type Faults = commitlog.Faults

// Key is a message key or unique id stored with a record.
type Key = commitlog.Key

// Record flags the engine sets on copies it writes (garbage collection,
// compaction).
const (
	FlagRelocated = commitlog.FlagRelocated
	FlagCompacted = commitlog.FlagCompacted
)

// Config configures an Engine. Zero values take the defaults of DefaultConfig.
type Config struct {
	Dir                string
	SegmentSize        int64
	Durability         Durability
	FlushInterval      time.Duration // async fsync interval
	IndexFlushInterval time.Duration // how often queue index tails are written out
	CheckpointInterval time.Duration
	IndexFileEntries   int64
	MaxOpenIndexFiles  int
	KeyIndexSlots      int
	KeyIndexEntries    int
	MaxRecordSize      int
	RetentionBytes     int64 // 0: no size limit
	RetentionInterval  time.Duration
	// Garbage collection: a frequent minor pass relocates nearly-dead
	// segments (live fraction below GCMinorThreshold), and half-dead ones
	// (GCMajorThreshold) too once they hold enough to free; a rarer major
	// pass takes every half-dead one. Copying is paced to GCBytesPerSecond
	// (0: unpaced) while the foreground writes, unpaced while it is idle.
	// A negative interval disables a pass.
	GCMinorThreshold  float64
	GCMajorThreshold  float64
	GCMinorInterval   time.Duration
	GCMajorInterval   time.Duration
	GCBytesPerSecond  int64
	MinFreeBytes      int64   // refuse writes when free space would drop below this
	MinFreeRatio      float64 // or below this fraction of the disk
	DiskCheckInterval time.Duration
	VerifyReads       bool // check each record's CRC32C when it is read
	NodeID            model.NodeID
	// Term is the term appended records are written in (default 1, a
	// single node's; the Kafka leader epoch is the term less one).
	Term   model.Term
	Logger *slog.Logger
	Now    func() time.Time
	// StateKeepers are checkpointed with the engine and replay the log
	// after the checkpoint on open.
	StateKeepers []StateKeeper
	// Hooks for metrics.
	OnSynced func(took time.Duration)
	// OnDurable, when set, is called after each fsync with the index of
	// the newest record now durable (a replication group's acknowledgement).
	OnDurable func(model.Index)
	// CommitGated: readers see only up to the end SetCommitted sets (the
	// commit index in a replication group), not the log's own visible end.
	CommitGated bool
	// Replicated makes the engine one replica of a replication group
	// (implies CommitGated; replicated.go): appends are accepted only while
	// SetLeader opened the log, each written record is handed to OnWritten
	// to be proposed, and appends return once Commit reached them.
	Replicated bool
	OnWritten  func(records [][]byte, size int64)
	// Tier, when set, keeps sealed segments in an object store bucket
	// (tiering.go).
	Tier *TierConfig
	// Faults, when set, injects commit-log I/O errors (tests).
	Faults *Faults
	// StatDisk, when set, replaces statfs of the data directory (tests
	// simulate a small disk with it).
	StatDisk func() (total, free int64, err error)
}

// DefaultConfig returns production defaults for dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:                dir,
		SegmentSize:        1 << 30,
		Durability:         DurabilityAsync,
		FlushInterval:      200 * time.Millisecond,
		IndexFlushInterval: 200 * time.Millisecond,
		CheckpointInterval: 5 * time.Second,
		IndexFileEntries:   1 << 18,
		MaxOpenIndexFiles:  2048,
		KeyIndexSlots:      1 << 20,
		KeyIndexEntries:    4 << 20,
		MaxRecordSize:      16 << 20,
		RetentionInterval:  30 * time.Second,
		GCMinorThreshold:   0.2,
		GCMajorThreshold:   0.5,
		GCMinorInterval:    time.Minute,
		GCMajorInterval:    30 * time.Minute,
		GCBytesPerSecond:   4 << 20,
		MinFreeBytes:       1 << 30,
		MinFreeRatio:       0.05,
		DiskCheckInterval:  time.Second,
		VerifyReads:        true,
		NodeID:             1,
	}
}

func (c *Config) fill() {
	d := DefaultConfig(c.Dir)
	if c.SegmentSize == 0 {
		c.SegmentSize = d.SegmentSize
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.IndexFlushInterval == 0 {
		c.IndexFlushInterval = d.IndexFlushInterval
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = d.CheckpointInterval
	}
	if c.IndexFileEntries == 0 {
		c.IndexFileEntries = d.IndexFileEntries
	}
	if c.MaxOpenIndexFiles == 0 {
		c.MaxOpenIndexFiles = d.MaxOpenIndexFiles
	}
	if c.KeyIndexSlots == 0 {
		c.KeyIndexSlots = d.KeyIndexSlots
	}
	if c.KeyIndexEntries == 0 {
		c.KeyIndexEntries = d.KeyIndexEntries
	}
	if c.MaxRecordSize == 0 {
		c.MaxRecordSize = d.MaxRecordSize
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = d.RetentionInterval
	}
	if c.DiskCheckInterval == 0 {
		c.DiskCheckInterval = d.DiskCheckInterval
	}
	if c.GCMinorThreshold == 0 {
		c.GCMinorThreshold = d.GCMinorThreshold
	}
	if c.GCMajorThreshold == 0 {
		c.GCMajorThreshold = d.GCMajorThreshold
	}
	if c.GCMinorInterval == 0 {
		c.GCMinorInterval = d.GCMinorInterval
	}
	if c.GCMajorInterval == 0 {
		c.GCMajorInterval = d.GCMajorInterval
	}
	if c.NodeID == 0 {
		c.NodeID = d.NodeID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Replicated {
		c.CommitGated = true
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("%w: data dir is empty", model.ErrInvalidConfig)
	case c.SegmentSize < 64<<10:
		return fmt.Errorf("%w: segment size %d below 64 KiB", model.ErrInvalidConfig, c.SegmentSize)
	case int64(c.MaxRecordSize) > c.SegmentSize-commitlog.HeaderSize:
		return fmt.Errorf("%w: max record size %d does not fit a segment of %d", model.ErrInvalidConfig, c.MaxRecordSize, c.SegmentSize)
	case c.MinFreeRatio < 0 || c.MinFreeRatio >= 1:
		return fmt.Errorf("%w: min free ratio %v", model.ErrInvalidConfig, c.MinFreeRatio)
	}
	return nil
}

// queue is the engine's state for one queue.
type queue struct {
	idx    *queueindex.Queue
	epochs epochCache
	pins   queuePins

	pendingFlush  atomic.Bool
	pendingNotify atomic.Bool
	sealed        atomic.Bool  // moving to another group: appends refused (SealQueue)
	lastEnd       atomic.Int64 // log end of the newest record, for notification

	wmu     sync.Mutex
	waiters []chan struct{} // signalled when new data becomes visible
}

// Engine is the storage engine of one replication group.
type Engine struct {
	cfg      Config
	log      *slog.Logger
	identity Identity

	clog  *commitlog.Log
	local *commitlog.Log // the local area (local.go)
	idx   *queueindex.Store
	keys  *keyindex.Index

	qmu    sync.RWMutex
	queues map[model.QueueID]*queue

	pmu sync.Mutex // guards the two pending lists
	// flushMu serialises index flushes: a checkpoint holds it from its
	// flush until it has captured every queue's state, so no flush is
	// half done (entries written, the queue's flushed count not yet
	// moved) when it does — recovery would otherwise skip the entries of
	// records the checkpoint says are indexed.
	flushMu      sync.Mutex
	flushPending []*queue
	notifyList   []*queue

	diskFull atomic.Bool
	stats    Stats

	ckptMu sync.Mutex // serialises checkpoints
	// Sections of the checkpoint opened from, and capture functions of
	// sections added after open.
	openedSections   map[string][]byte
	sectionMu        sync.Mutex
	sectionProviders map[string]func() ([]byte, error)
	ckptPos          atomic.Int64 // log position of the last checkpoint
	localCkpt        atomic.Int64 // local-area position of the last checkpoint
	// The last checkpoint's record index and sections (under ckptMu), for
	// truncation; appliedFloor is the index of the newest record applied
	// in place (truncate.go).
	ckptIndex    model.Index
	ckptSections map[string][]byte
	appliedFloor atomic.Int64
	keeperSnaps  keeperSnapshots // keepersnap.go
	committed    atomic.Int64    // the committed end (visibility.go)
	repl         replication     // replicated.go
	manifest     tierManifest    // tiered segments (tiermanifest.go)
	tier         *tiering        // nil when tiering is off (tiering.go)
	// gcMu serialises garbage-collection passes, reclaimMu segment
	// reclamation; gcRelocating lets copies roll a segment into the disk
	// guard's reserve.
	gcMu, reclaimMu sync.Mutex
	gcRelocating    atomic.Bool
	tierCommitting  atomic.Int32           // tier records being written (tiering.go)
	replicaStoring  atomic.Int32           // a leader's records being stored (AppendEntries)
	recount         map[*queue]bool        // queues to recount after recovery
	inPlace         map[model.QueueID]bool // queues changed in place since the last checkpoint (ckptMu)

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// flushChunk is the number of index entries a queue collects before the
// periodic flusher writes them out (checkpoints write every tail).
const flushChunk = 64

// Stats are counters the engine keeps for metrics.
type Stats struct {
	AppendedRecords  atomic.Int64
	AppendedMessages atomic.Int64
	AppendedBytes    atomic.Int64
	ReadRecords      atomic.Int64
	ReadBytes        atomic.Int64
	Checkpoints      atomic.Int64
	DeletedSegments  atomic.Int64
	RefusedDiskFull  atomic.Int64
	GCCopiedBytes    atomic.Int64
}

// Open opens or creates the engine in cfg.Dir and recovers it.
func Open(cfg Config) (*Engine, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	id, err := loadIdentity(cfg.Dir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "storage"),
		identity: id,
		queues:   map[model.QueueID]*queue{},
	}
	start := time.Now()
	// Read first: without a usable checkpoint the index files are removed.
	ck, err := readCheckpoint(filepath.Join(cfg.Dir, checkpointName))
	if err != nil {
		return nil, err
	}
	if e.idx, err = queueindex.NewStore(filepath.Join(cfg.Dir, "index"), cfg.IndexFileEntries, cfg.MaxOpenIndexFiles); err != nil {
		return nil, err
	}
	if e.keys, err = keyindex.Open(filepath.Join(cfg.Dir, "keys"), cfg.KeyIndexSlots, cfg.KeyIndexEntries); err != nil {
		e.idx.Close()
		return nil, err
	}
	var counted map[model.QueueID]queueindex.SegmentBytes
	if data, ok := ck.Sections[bytesSection]; ok {
		if counted, err = decodeQueueBytes(data); err != nil {
			e.log.Warn("checkpoint live-byte accounting unreadable; recounting", "err", err)
			counted = nil
		}
	}
	e.recount = map[*queue]bool{}
	inPlace := readInPlace(cfg.Dir)
	for _, qs := range ck.Queues {
		b, ok := counted[qs.ID]
		q := &queue{idx: e.idx.Open(qs.ID, qs.State, b)}
		if !ok {
			e.recount[q] = true // a checkpoint from before live-byte accounting
		}
		e.queues[qs.ID] = q
	}
	e.restoreEpochs(ck.Sections)
	e.restoreKeeperPins(ck.Sections[keeperPinsSection])
	if err := e.restorePins(ck.Sections[pinsSection]); err != nil {
		e.log.Warn("checkpoint pins unreadable", "err", err)
	}
	e.openedSections = ck.Sections
	e.ckptIndex, e.ckptSections = ck.nextIndex(), ck.Sections
	if _, had := ck.Sections[tierManifestName]; had || cfg.Tier != nil {
		// The manifest is kept as long as the log may name tiered
		// segments, also by a node opened without a bucket.
		cfg.StateKeepers = append(slices.Clip(cfg.StateKeepers), &e.manifest)
		e.cfg.StateKeepers = cfg.StateKeepers
	}
	if cfg.Tier != nil {
		tc := *cfg.Tier
		tc.fill()
		e.tier = &tiering{cfg: tc, kick: make(chan struct{}, 1), prefetches: make(chan struct{}, maxPrefetches)}
		e.tier.cache = newTierCache(tc.Bucket, tc.ChunkBytes, tc.CacheBytes, &e.tier.stats)
		e.tier.cache.onRead = tc.OnColdRead
	}
	if err := restoreKeepers(cfg.StateKeepers, ck.Sections); err != nil {
		e.keys.Close()
		e.idx.Close()
		return nil, err
	}
	replayed := 0
	if err := e.openLocal(ck.Sections); err != nil {
		e.keys.Close()
		e.idx.Close()
		return nil, err
	}
	// Without a checkpoint the commit log alone is replayed: copies of
	// records in the segments it no longer has are applied in its order.
	var merge *originMerger
	if ck.LogPos == 0 && len(ck.Queues) == 0 {
		e.keeperSnaps.found = map[string]foundSnapshot{}
		if merge, err = e.newOriginMerger(); err != nil {
			e.local.Close()
			e.keys.Close()
			e.idx.Close()
			return nil, err
		}
	}
	e.clog, err = commitlog.Open(commitlog.Options{
		Dir:           filepath.Join(cfg.Dir, "log"),
		SegmentSize:   cfg.SegmentSize,
		Mode:          cfg.Durability,
		FlushInterval: cfg.FlushInterval,
		Logger:        cfg.Logger,
		Now:           cfg.Now,
		Term:          cfg.Term,
		Faults:        cfg.Faults,
		Replicated:    cfg.Replicated,
		OnWritten:     cfg.OnWritten,
		BeforeRoll:    e.checkDiskNow,
		OnVisible:     e.logVisible,
		OnSynced: func(_ model.LogPos, index model.Index, took time.Duration) {
			if cfg.OnSynced != nil {
				cfg.OnSynced(took)
			}
			if cfg.OnDurable != nil {
				cfg.OnDurable(index)
			}
		},
	}, commitlog.Recovery{Pos: ck.LogPos, NextIndex: ck.nextIndex()}, func(pos model.LogPos, r *commitlog.Record) error {
		replayed++
		if merge != nil {
			if err := merge.before(pos, r); err != nil {
				return err
			}
		}
		return e.replay(pos, r)
	})
	if err == nil && merge != nil {
		err = merge.before(model.LocalPosBase-1, nil)
	}
	if err == nil && merge != nil {
		err = e.restoreFoundSnapshots()
	}
	if err != nil {
		e.local.Close()
		e.keys.Close()
		e.idx.Close()
		return nil, err
	}
	e.ckptPos.Store(int64(ck.LogPos))
	// The local area's tail after the commit log's: compaction results
	// replayed from the log come before the copies made after them.
	if err := e.replayLocalTail(); err != nil {
		e.clog.Close()
		e.local.Close()
		e.keys.Close()
		e.idx.Close()
		return nil, err
	}
	e.idx.SetSegmentOf(e.segmentBase)
	for _, id := range inPlace {
		if q := e.queues[id]; q != nil {
			e.recount[q] = true
		}
		if e.inPlace == nil {
			e.inPlace = map[model.QueueID]bool{}
		}
		e.inPlace[id] = true // the next checkpoint clears the list
	}
	for q := range e.recount {
		if e.queues[q.idx.ID()] != q {
			continue // deleted while replaying
		}
		if err := q.idx.RebuildBytes(); err != nil {
			e.Close()
			return nil, err
		}
	}
	e.recount = nil
	if end := e.clog.End(); end < ck.LogPos {
		// The log lost data the checkpoint had indexed (an async-mode power
		// loss): drop index entries that point past the end.
		e.log.Warn("log ends before checkpoint; truncating indexes", "end", end, "checkpoint", ck.LogPos)
		for _, q := range e.queues {
			if _, err := q.idx.TruncateFromPos(end); err != nil {
				e.Close()
				return nil, err
			}
			q.epochs.truncateFrom(q.idx.NextOffset())
		}
	}
	if cfg.Replicated && ck.LogPos > 0 && e.ckptIndex > 1 {
		// A replica's checkpoint lies at a committed point.
		e.repl.commitIndex.Store(uint64(e.ckptIndex - 1))
		e.committed.Store(int64(ck.LogPos))
	}
	e.checkDisk()
	e.log.Info("storage opened", "dir", cfg.Dir, "queues", len(e.queues), "log_start", e.clog.Start(),
		"log_end", e.clog.End(), "replayed_records", replayed, "took", time.Since(start))
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.startBackground(ctx)
	return e, nil
}

// Identity returns the persisted node identity.
func (e *Engine) Identity() Identity { return e.identity }

// Config returns the effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Close stops background work, writes a final checkpoint and closes files.
func (e *Engine) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	var err error
	if e.clog != nil {
		err = e.checkpoint()
		e.clog.Close()
		e.local.Close()
	}
	e.keys.Close()
	e.idx.Close()
	e.wakeAll()
	e.repl.broadcast()
	return err
}

// PowerLoss stops the engine as a power failure would (fault injection for
// crash tests): no checkpoint is written, and the log loses every byte not
// fsynced. Open the directory again to recover.
func (e *Engine) PowerLoss() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	err := errors.Join(e.clog.PowerLoss(), e.local.PowerLoss())
	e.keys.Close()
	e.idx.Close()
	e.wakeAll()
	e.repl.broadcast()
	return err
}

// startBackground starts the index flusher, checkpointer, retention and disk
// guard loops; Close waits for them.
func (e *Engine) startBackground(ctx context.Context) {
	loop := func(every time.Duration, name string, fn func() error) {
		task.Every(ctx, &e.wg, every, func(context.Context) error { return fn() },
			func(err error) { e.log.Error("background task failed", "task", name, "err", err) })
	}
	loop(e.cfg.IndexFlushInterval, "index-flush", func() error {
		e.flushMu.Lock()
		defer e.flushMu.Unlock()
		return e.flushIndexes(flushChunk)
	})
	loop(e.cfg.CheckpointInterval, "checkpoint", e.checkpoint)
	loop(e.cfg.RetentionInterval, "retention", func() error { _, err := e.EnforceRetention(); return err })
	loop(e.cfg.DiskCheckInterval, "disk-guard", func() error {
		e.checkDisk()
		if e.tier != nil && e.diskFull.Load() {
			// Tiered segments make room at once, not at the next
			// retention pass (tiering.go).
			_, _, err := e.reclaimTiered(ctx, true)
			return err
		}
		return nil
	})
	if e.cfg.GCMinorInterval > 0 {
		loop(e.cfg.GCMinorInterval, "gc-minor", func() error { _, err := e.scheduledGC(ctx); return err })
	}
	if e.cfg.GCMajorInterval > 0 {
		loop(e.cfg.GCMajorInterval, "gc-major", func() error { _, err := e.GC(ctx, e.cfg.GCMajorThreshold); return err })
	}
	if e.tier != nil {
		e.tier.ctx = ctx
		e.tier.cache.background = e.inBackground
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.uploadLoop(ctx)
		}()
	}
}

// QueueIDs returns the ids of every queue, sorted.
func (e *Engine) QueueIDs() []model.QueueID {
	e.qmu.RLock()
	ids := make([]model.QueueID, 0, len(e.queues))
	for id := range e.queues {
		ids = append(ids, id)
	}
	e.qmu.RUnlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// QueueCount returns the number of queues.
func (e *Engine) QueueCount() int {
	e.qmu.RLock()
	defer e.qmu.RUnlock()
	return len(e.queues)
}

func (e *Engine) queue(id model.QueueID) (*queue, error) {
	e.qmu.RLock()
	q := e.queues[id]
	e.qmu.RUnlock()
	if q == nil {
		return nil, fmt.Errorf("%w: %d", model.ErrUnknownQueue, id)
	}
	return q, nil
}

// LogStats describes the commit log and the local area.
type LogStats struct {
	Start, End, Synced model.LogPos
	Segments           int   // both logs
	Bytes              int64 // both logs
	LocalSegments      int
	LocalBytes         int64 // the local area (garbage-collection copies)
	NextIndex          model.Index
	FirstIndex         model.Index // first of the contiguous replicated range
	OpenIndexFiles     int
}

// LogStats returns the logs' current shape.
func (e *Engine) LogStats() LogStats {
	return LogStats{
		Start: e.clog.Start(), End: e.clog.End(), Synced: e.clog.Synced(),
		Segments: e.clog.SegmentCount() + e.local.SegmentCount(), Bytes: e.clog.Size() + e.local.Size(),
		LocalSegments: e.local.SegmentCount(), LocalBytes: e.local.Size(),
		NextIndex: e.clog.NextIndex(), FirstIndex: e.clog.FirstIndex(),
		OpenIndexFiles: e.idx.OpenFiles(),
	}
}
