package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// Tiering: sealed commit-log segments go to a bucket (package tier) and come
// back for reads below what a member keeps locally.
//
//   - Upload: the group's leader (a single node always) lays out each sealed,
//     durable (committed) segment that still holds live records as an object
//     and writes it create-only under <KeyPrefix><first index>-<term>; then
//     commits it with a tier commit record (tiermanifest.go). A leader deposed
//     meanwhile fails to commit; its object is an orphan the sweep removes.
//   - Local deletion: a tiered segment's file is deleted once it falls out of
//     the local retention (bytes and time); index entries keep pointing at
//     its positions, which reads then find in the bucket.
//   - Reads: a record whose segment is gone locally is read from its object
//     — the object's index (fetched once, checked against the commit record)
//     locates it, and a ranged GET brings it with the queue's following
//     records (a chunk) into a bounded cache.

// TierConfig configures tiering. A nil Config.Tier disables it.
type TierConfig struct {
	Bucket tier.Bucket
	// KeyPrefix begins every object key of this engine (the group's
	// directory in the bucket, e.g. "g3/").
	KeyPrefix string
	// UploadInterval is how often sealed segments are looked for.
	UploadInterval time.Duration
	// A tiered segment leaves local disk once it is older than
	// LocalRetentionTime or outside the newest LocalRetentionBytes of the
	// log (Kafka's local.retention.ms/bytes; zero: no such limit; both
	// zero: as soon as it is tiered).
	LocalRetentionBytes int64
	LocalRetentionTime  time.Duration
	// CacheBytes bounds the cache of cold reads; ChunkBytes is how much of
	// a queue one ranged GET brings.
	CacheBytes int64
	ChunkBytes int64
	// RequestTimeout bounds one cold read's wait for the store.
	RequestTimeout time.Duration
	// SweepInterval is how often the leader sweeps the bucket for objects
	// the manifest does not name; OrphanGrace is how old such an object
	// must be to go (it outlives any upload in flight).
	SweepInterval time.Duration
	OrphanGrace   time.Duration
	// AwaitFilter pauses uploads until SetTierFilter gives a filter (the
	// broker does once its topics are loaded, and takes it back when it
	// closes), so a topic's opt-out holds from the first upload on.
	AwaitFilter bool
	// OnColdRead, when set, is told how long each ranged read of records
	// from the store took (metrics).
	OnColdRead func(took time.Duration)
}

func (c *TierConfig) fill() {
	if c.UploadInterval == 0 {
		c.UploadInterval = 10 * time.Second
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = 256 << 20
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = 4 << 20
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 10 * time.Minute
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = time.Hour
	}
}

// TierStats are the tiering counters.
type TierStats struct {
	UploadedSegments atomic.Int64
	UploadedBytes    atomic.Int64
	UploadErrors     atomic.Int64
	ColdReadBytes    atomic.Int64
	ColdReads        atomic.Int64 // ranged GETs of records
	CacheHits        atomic.Int64
	CacheMisses      atomic.Int64
}

// tiering is the engine's tiering state.
type tiering struct {
	cfg   TierConfig
	cache *tierCache
	stats TierStats
	// kick wakes the uploader early (a segment was sealed).
	kick chan struct{}
	// ctx is the engine's background context (set when background work
	// starts); prefetches holds a token per running prefetch.
	ctx        context.Context
	prefetches chan struct{}

	uploadMu sync.Mutex // serialises upload passes
	// keep, when set, says which queues' records go into objects
	// (SetTierFilter); the others stay on local disk.
	keep atomic.Pointer[func(model.QueueID) bool]

	mu        sync.Mutex
	lastErr   error // the last upload's failure, nil once one succeeds
	lastErrAt time.Time
}

// TierStatus says how tiering stands, for the admin API, metrics and health.
type TierStatus struct {
	Enabled          bool      `json:"enabled"`
	Segments         int       `json:"segments"`          // committed to the bucket
	Bytes            int64     `json:"bytes"`             // their objects' size
	LocalSegments    int       `json:"local_segments"`    // of them still on local disk
	PendingSegments  int       `json:"pending_segments"`  // sealed, holding live records, not tiered yet
	PendingBytes     int64     `json:"pending_bytes"`     // the upload lag
	UploadedSegments int64     `json:"uploaded_segments"` // by this process
	UploadedBytes    int64     `json:"uploaded_bytes"`    // by this process
	UploadErrors     int64     `json:"upload_errors"`     // failed upload passes
	ColdReads        int64     `json:"cold_reads"`        // ranged GETs of records
	ColdReadBytes    int64     `json:"cold_read_bytes"`   //
	CacheHits        int64     `json:"cache_hits"`        // cold reads served from the cache
	CacheMisses      int64     `json:"cache_misses"`      //
	LastError        string    `json:"last_error,omitempty"`
	LastErrorAt      time.Time `json:"last_error_at,omitzero"`
}

// TierStatus reports tiering's state.
func (e *Engine) TierStatus() TierStatus {
	var st TierStatus
	tiered := e.manifest.list()
	st.Segments = len(tiered)
	for _, s := range tiered {
		st.Bytes += s.Size
	}
	for _, u := range e.Usage() {
		switch {
		case u.Base.IsLocal() || !u.Sealed:
		case e.manifest.has(u.Base):
			st.LocalSegments++
		case u.Live > 0:
			st.PendingSegments++
			st.PendingBytes += int64(u.End - u.Base)
		}
	}
	if e.tier == nil {
		return st
	}
	t := e.tier
	st.Enabled = true
	st.UploadedSegments, st.UploadedBytes, st.UploadErrors = t.stats.UploadedSegments.Load(), t.stats.UploadedBytes.Load(), t.stats.UploadErrors.Load()
	st.ColdReads, st.ColdReadBytes = t.stats.ColdReads.Load(), t.stats.ColdReadBytes.Load()
	st.CacheHits, st.CacheMisses = t.stats.CacheHits.Load(), t.stats.CacheMisses.Load()
	t.mu.Lock()
	if t.lastErr != nil {
		st.LastError, st.LastErrorAt = t.lastErr.Error(), t.lastErrAt
	}
	t.mu.Unlock()
	return st
}

// TierStats returns the tiering counters (nil when tiering is off).
func (e *Engine) TierStats() *TierStats {
	if e.tier == nil {
		return nil
	}
	return &e.tier.stats
}

// SetTierFilter says which queues' records go to the bucket: keep(q) false
// leaves q's records out of the objects uploaded from now on, and their
// local copies outlive the segment's file (moved to the local area as
// garbage collection moves records). Control records always go. A nil keep
// tiers every queue (or, with TierConfig.AwaitFilter, pauses uploads).
func (e *Engine) SetTierFilter(keep func(model.QueueID) bool) {
	if e.tier == nil {
		return
	}
	if keep == nil {
		e.tier.keep.Store(nil)
		return
	}
	e.tier.keep.Store(&keep)
}

// tierKeep is the filter of the next objects (nil: every record); ok is
// false while uploads wait for one (TierConfig.AwaitFilter).
func (e *Engine) tierKeep() (keep func(model.QueueID) bool, ok bool) {
	p := e.tier.keep.Load()
	if p == nil {
		return nil, !e.tier.cfg.AwaitFilter
	}
	filter := *p
	return func(q model.QueueID) bool { return q == engineQueue || filter(q) }, true
}

// TierBehind says whether tiering is on and sealed segments wait for
// their upload (or the last upload pass failed): they are what fills the
// disk, and every replica of the group holds them alike until the store
// takes them.
func (e *Engine) TierBehind() bool {
	if e.tier == nil {
		return false
	}
	e.tier.mu.Lock()
	failed := e.tier.lastErr != nil
	e.tier.mu.Unlock()
	if failed {
		return true
	}
	for _, s := range e.clog.Segments() {
		if s.Sealed && !e.manifest.has(s.Base) {
			return true
		}
	}
	return false
}

// TierFreeable says whether tiering is on and a tiered segment is still on
// local disk: at the disk guard it leaves at the next disk check, freeing
// the disk the same way on every replica.
func (e *Engine) TierFreeable() bool {
	if e.tier == nil {
		return false
	}
	for _, s := range e.clog.Segments() {
		if s.Sealed && e.manifest.has(s.Base) {
			return true
		}
	}
	return false
}

// Tiered says whether tiering is on.
func (e *Engine) Tiered() bool { return e.tier != nil }

// BucketOnlyEnds says, per queue with records only in the bucket (their
// segment's file deleted locally), the offset those records end at: a
// queue's records below it are read from the bucket, from it on from local
// disk (Kafka's local log start offset). Local deletion takes the oldest
// segments first, so that part is a prefix of the queue.
func (e *Engine) BucketOnlyEnds() map[model.QueueID]model.QueueOffset {
	local := map[model.LogPos]bool{}
	for _, s := range e.clog.Segments() {
		local[s.Base] = true
	}
	out := map[model.QueueID]model.QueueOffset{}
	for _, s := range e.manifest.list() {
		if local[s.Base] {
			continue
		}
		for _, q := range s.Queues {
			out[q.Queue] = max(out[q.Queue], q.End)
		}
	}
	return out
}

// TieredSegments lists the segments committed to the bucket.
func (e *Engine) TieredSegments() []*TieredSegment { return e.manifest.list() }

// uploadLoop uploads sealed segments until ctx ends.
func (e *Engine) uploadLoop(ctx context.Context) {
	t := time.NewTicker(e.tier.cfg.UploadInterval)
	defer t.Stop()
	backoff := time.Duration(0)
	var lastSweep time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.tier.kick:
		}
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		_, err := e.UploadSealed(ctx)
		e.tier.mu.Lock()
		if err != nil && ctx.Err() == nil {
			e.tier.lastErr, e.tier.lastErrAt = err, e.cfg.Now()
		} else if err == nil {
			e.tier.lastErr = nil
		}
		e.tier.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			e.tier.stats.UploadErrors.Add(1)
			// Doubling from a second, up to ten upload intervals and at
			// most half a minute (5 s at the disk guard): the store is
			// found back soon after it returns.
			backoff = min(max(2*backoff, time.Second), max(10*e.tier.cfg.UploadInterval, time.Second), 30*time.Second)
			if e.diskFull.Load() {
				// Writes wait for the store: find it back within seconds.
				backoff = min(backoff, 5*time.Second)
			}
			e.log.Warn("tier upload failed; retrying", "retry_in", backoff, "err", err)
			continue
		}
		backoff = 0
		if _, err := e.DropExpiredTiered(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("dropping expired tiered segments failed", "err", err)
		}
		if now := e.cfg.Now(); now.Sub(lastSweep) >= e.tier.cfg.SweepInterval {
			lastSweep = now
			if _, err := e.SweepBucket(ctx, e.tier.cfg.OrphanGrace); err != nil && ctx.Err() == nil {
				e.log.Warn("bucket sweep failed", "err", err)
			}
		}
	}
}

// UploadSealed uploads and commits every sealed segment that is durable,
// holds live records and is not tiered yet, oldest first, while this
// engine may write (a group's leader). It returns how many it committed.
// A pass that succeeds (the loop's or one asked for) clears the last
// upload error.
func (e *Engine) UploadSealed(ctx context.Context) (int, error) {
	if e.tier == nil {
		return 0, nil
	}
	n, err := e.uploadSealed(ctx)
	if err == nil {
		e.tier.mu.Lock()
		e.tier.lastErr = nil
		e.tier.mu.Unlock()
	}
	return n, err
}

func (e *Engine) uploadSealed(ctx context.Context) (int, error) {
	// One pass at a time (the loop's, the admin API's): two would upload
	// the same segment twice.
	e.tier.uploadMu.Lock()
	defer e.tier.uploadMu.Unlock()
	keep, ok := e.tierKeep()
	if !ok {
		return 0, nil
	}
	done := 0
	for _, u := range e.Usage() {
		if ctx.Err() != nil {
			return done, ctx.Err()
		}
		if u.Base.IsLocal() || !u.Sealed || u.Live == 0 || e.manifest.has(u.Base) || !e.uploadable(u) {
			continue
		}
		if e.cfg.Replicated && !e.appliedAsLeader() {
			// Only the leader uploads, once it has applied what was
			// stored before its term (a commit it has not applied yet
			// would make it upload a tiered segment again).
			return done, nil
		}
		if err := e.uploadSegment(ctx, u, keep); err != nil {
			return done, err
		}
		done++
	}
	return done, nil
}

// uploadable reports whether every record of a sealed segment is durable:
// fsynced on a single node, committed in a group.
func (e *Engine) uploadable(u SegmentUsage) bool {
	if u.End > e.clog.Synced() {
		return false
	}
	return !e.cfg.Replicated || u.End <= e.visible()
}

// uploadSegment lays out one segment, writes its object and commits it.
func (e *Engine) uploadSegment(ctx context.Context, u SegmentUsage, keep func(model.QueueID) bool) error {
	v, err := e.clog.Acquire(u.Base)
	if err != nil {
		return err
	}
	defer v.Release()
	seg, ok := v.Bytes(u.Base, int(u.End-u.Base))
	if !ok {
		return fmt.Errorf("%w: segment %d shorter than %d bytes", model.ErrCorruptRecord, u.Base, u.End-u.Base)
	}
	obj, err := tier.Build(seg, u.Base, keep)
	if err != nil {
		return err
	}
	term := e.clog.CurrentTerm()
	key := fmt.Sprintf("%s%020d-%d", e.tier.cfg.KeyPrefix, obj.Index.FirstIndex, term)
	start := time.Now()
	err = e.tier.cfg.Bucket.Create(ctx, key, obj.Size(), obj.Reader())
	if errors.Is(err, tier.ErrObjectExists) {
		// This term's own earlier attempt: the key is unique to the
		// term and the bytes are the segment's, so it is the same object.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("upload segment %d: %w", u.Base, err)
	}
	s := &TieredSegment{
		Key: key, Term: term, Base: u.Base, End: u.End, FirstIndex: obj.Index.FirstIndex, LastIndex: obj.Index.LastIndex,
		Size: obj.Size(), IndexLen: obj.Trailer.IndexLen, IndexCRC: obj.Trailer.IndexCRC, DataCRC: obj.Trailer.DataCRC,
		MaxStoreTime: obj.Index.MaxStoreTime,
	}
	for _, q := range obj.Index.Queues {
		s.Queues = append(s.Queues, TieredQueue{Queue: q.Queue, First: q.FirstOffset, End: q.EndOffset, MaxTimestamp: q.MaxTimestamp})
	}
	if err := e.commitTiered(ctx, s); err != nil {
		return fmt.Errorf("commit tiered segment %d: %w", u.Base, err)
	}
	e.tier.stats.UploadedSegments.Add(1)
	e.tier.stats.UploadedBytes.Add(obj.Size())
	e.log.Info("segment tiered", "base", u.Base, "key", key, "bytes", obj.Size(), "queues", len(s.Queues),
		"records", obj.Index.Records(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// commitTiered writes the tier commit record and applies it once durable
// (committed in a group: a deposed leader's commit fails).
func (e *Engine) commitTiered(ctx context.Context, s *TieredSegment) error {
	return e.writeTierRecord(ctx, tierCommitPayload(s))
}

// writeTierRecord writes a tier commit or drop record and applies it once
// durable (committed in a group). At the disk guard it may take a segment
// of the reserve: committing what is in the bucket is what lets local
// segments go.
func (e *Engine) writeTierRecord(ctx context.Context, payload []byte) error {
	rec := &commitlog.Entry{Format: model.FormatInternal, Flags: commitlog.FlagControl, Queue: engineQueue, Count: 1, Payload: payload}
	e.tierCommitting.Add(1)
	err := e.writeDurable(ctx, []*commitlog.Entry{rec}, controlAssigner{e})
	e.tierCommitting.Add(-1)
	if err != nil {
		return err
	}
	e.applyControl(rec.Queue, rec.Payload, rec.Pos, rec.Size)
	e.noteApplied([]*commitlog.Entry{rec})
	return nil
}

// readTiered reads the record ent points at from the bucket, when its
// segment is tiered; ok is false when it is not.
func (e *Engine) readTiered(ent queueindex.Entry) (StoredRecord, bool, error) {
	s := e.manifest.find(ent.Pos)
	if s == nil {
		return StoredRecord{}, false, nil
	}
	if e.tier == nil {
		return StoredRecord{}, true, fmt.Errorf("%w: record at %d is in the bucket and tiering is not configured", model.ErrTierUnavailable, ent.Pos)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.tier.cfg.RequestTimeout)
	defer cancel()
	b, err := e.tier.cache.record(ctx, s, ent.Pos, int64(ent.Size))
	if err != nil {
		return StoredRecord{}, true, err
	}
	rec, err := commitlog.Decode(b)
	if err != nil {
		return StoredRecord{}, true, err
	}
	rec.Pos = ent.Pos
	return rec, true, nil
}

// reclaimTiered deletes the local files of tiered segments that fell out of
// the local retention, oldest first: their pinned control records and the
// live records their object left out go to the local area first (as garbage
// collection moves them), and a checkpoint and the keepers' snapshots make
// the state they fed durable. What an object left out is read from the
// object's queue list, committed in the log, so every replica moves the
// same records whatever its filter says.
//
// At the disk guard (pressed) every tiered segment goes, local retention
// or not: its records are safe in the bucket, and the hot tail gives way
// to writes.
func (e *Engine) reclaimTiered(ctx context.Context, pressed bool) (deleted int, freed int64, err error) {
	if e.tier == nil {
		return 0, 0, nil
	}
	e.gcMu.Lock() // relocates, as a pass does (lock order: gcMu, reclaimMu)
	defer e.gcMu.Unlock()
	e.reclaimMu.Lock()
	defer e.reclaimMu.Unlock()
	cands := e.tieredOutOfRetention(pressed)
	if len(cands) == 0 {
		return 0, 0, nil
	}
	th := newThrottle(0)
	for _, u := range cands {
		if _, _, err := e.relocate(ctx, u, th, e.manifest.find(u.Base)); err != nil {
			return 0, 0, err
		}
	}
	if err := e.checkpoint(); err != nil {
		return 0, 0, err
	}
	if err := e.snapshotKeepers(ctx, min(cands[len(cands)-1].End, e.lastCheckpoint())); err != nil {
		return 0, 0, err
	}
	pinned := map[model.LogPos]int64{}
	for _, q := range e.queueList() {
		q.pins.bytes(pinned, e.segmentBase, q.idx.StartOffset())
	}
	e.keeperPinBytes(pinned)
	var errs []error
	for _, u := range cands {
		if pinned[u.Base] != 0 {
			continue // a pin moved meanwhile; next pass
		}
		ok, err := e.clog.DeleteSegment(u.Base, e.lastCheckpoint())
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			deleted++
			freed += int64(u.End - u.Base)
		}
	}
	if deleted > 0 {
		e.stats.DeletedSegments.Add(int64(deleted))
		e.log.Info("tiered segments left local disk", "segments", deleted, "bytes", freed)
		e.checkDisk()
	}
	return deleted, freed, errors.Join(errs...)
}

// tieredOutOfRetention lists the sealed, tiered commit-log segments past
// the local retention, as Kafka's local.retention.* apply: older than
// LocalRetentionTime (when set), or outside the newest LocalRetentionBytes
// of the log (when set); with neither set, or all, every tiered segment.
func (e *Engine) tieredOutOfRetention(all bool) []SegmentUsage {
	segs := e.clog.Segments()
	keepBytes, keepTime := e.tier.cfg.LocalRetentionBytes, e.tier.cfg.LocalRetentionTime.Milliseconds()
	inBytes := len(segs) // segs[inBytes:] are the newest LocalRetentionBytes
	var kept int64
	for inBytes > 0 && kept+int64(segs[inBytes-1].End-segs[inBytes-1].Base) <= keepBytes {
		inBytes--
		kept += int64(segs[inBytes].End - segs[inBytes].Base)
	}
	now := e.cfg.Now().UnixMilli()
	var out []SegmentUsage
	for i, s := range segs {
		if !s.Sealed || !e.manifest.has(s.Base) {
			continue
		}
		expired := keepTime > 0 && now-s.LastTime > keepTime
		outside := keepBytes > 0 && i < inBytes
		if all || expired || outside || (keepTime <= 0 && keepBytes <= 0) {
			out = append(out, SegmentUsage{Base: s.Base, End: s.End, LastTime: s.LastTime, Sealed: true})
		}
	}
	return out
}

// maxPrefetches bounds the background cold reads of one engine.
const maxPrefetches = 8

// Prefetch starts reading, in the background, the record of queue id at
// offset when it lives only in the bucket, so that a reader of several
// queues (a Kafka fetch of many partitions) waits for their cold reads at
// once rather than one after another. It returns at once; when
// maxPrefetches reads are already running it does nothing.
func (e *Engine) Prefetch(id model.QueueID, offset model.QueueOffset) {
	if e.tier == nil {
		return
	}
	q, err := e.queue(id)
	if err != nil || offset < q.idx.StartOffset() || offset >= q.idx.VisibleEnd(e.visible()) {
		return
	}
	_, ent, err := q.idx.Lookup(offset)
	if err != nil || ent.Hole() || ent.Pos.IsLocal() {
		return
	}
	e.prefetchAt(ent.Pos, int64(ent.Size))
}

// prefetchAt fills the cache with the record at pos (and its queue's
// chunk) in the background, if its segment is tiered and not local.
func (e *Engine) prefetchAt(pos model.LogPos, size int64) {
	if _, local := e.clog.SegmentBase(pos); local {
		return
	}
	s := e.manifest.find(pos)
	if s == nil {
		return
	}
	e.inBackground(func(ctx context.Context) { _, _ = e.tier.cache.record(ctx, s, pos, size) })
}

// inBackground runs a cold read in a goroutine of the engine's, unless
// maxPrefetches are running (then it drops it: this is only ever ahead of
// a reader, who fetches what it needs itself).
func (e *Engine) inBackground(fn func(context.Context)) {
	if e.tier.ctx == nil || e.closed.Load() {
		return
	}
	select {
	case e.tier.prefetches <- struct{}{}:
	default:
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() { <-e.tier.prefetches }()
		ctx, cancel := context.WithTimeout(e.tier.ctx, e.tier.cfg.RequestTimeout)
		defer cancel()
		fn(ctx)
	}()
}
