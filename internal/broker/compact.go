package broker

// Log compaction (Kafka cleanup.policy=compact, and RocketMQ compaction
// topics): a queue keeps the latest message per key. A pass over a queue
// reads it from its start to its cleanable end — below the last stable
// offset (open transactions are never cleaned) and older than
// min.compaction.lag.ms — and builds the latest offset of every key
// (a Kafka record's key; a RocketMQ message's first KEYS entry). Then it
// rewrites every record holding superseded messages: a Kafka batch keeps
// its header and offset range with the surviving records re-compressed
// with its codec; a record with nothing left becomes a hole in the index
// (its offsets stay used, fetches step over them). Tombstones (null
// values) go once older than delete.retention.ms; records of aborted
// transactions go; transaction markers stay. Messages without a key stay.
// The newest record of a queue is never removed whole (Kafka never cleans
// its active segment; a reader always finds the end). A queue is cleaned when the bytes written since its
// last pass make up min.cleanable.dirty.ratio of it, or when its oldest
// uncleaned message is older than max.compaction.lag.ms. Offsets never
// change; the storage engine moves the index (RewriteRecords) and garbage
// collection frees the superseded bytes.

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// compactionConfig is a topic's compaction settings (Kafka's names).
type compactionConfig struct {
	deleteRetention time.Duration // tombstones are kept this long
	minLag, maxLag  time.Duration
	dirtyRatio      float64
}

// Compacted reports whether a topic's cleanup policy compacts it.
func (c TopicConfig) Compacted() bool { return strings.Contains(c.CleanupPolicy, "compact") }

// Deletes reports whether retention by time and size applies (cleanup
// policy delete, the default, or compact,delete).
func (c TopicConfig) Deletes() bool {
	return c.CleanupPolicy == "" || strings.Contains(c.CleanupPolicy, "delete")
}

func (c TopicConfig) compaction() compactionConfig {
	ms := func(key string, def int64) time.Duration {
		if n, err := strconv.ParseInt(c.Extra[key], 10, 64); err == nil && n >= 0 {
			def = n
		}
		return time.Duration(min(def, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	}
	cc := compactionConfig{deleteRetention: ms("delete.retention.ms", 86_400_000), minLag: ms("min.compaction.lag.ms", 0),
		maxLag: ms("max.compaction.lag.ms", math.MaxInt64), dirtyRatio: 0.5}
	if f, err := strconv.ParseFloat(c.Extra["min.cleanable.dirty.ratio"], 64); err == nil && f >= 0 && f <= 1 {
		cc.dirtyRatio = f
	}
	return cc
}

// compactState remembers how far each queue was cleaned (in memory: after
// a restart the first pass cleans every queue again). Passes are
// serialised: two over one queue would each miss the other's rewrites.
type compactState struct {
	pass    sync.Mutex
	mu      sync.Mutex
	cleaned map[model.QueueID]model.QueueOffset
}

// CompactionResult says what a compaction pass did.
type CompactionResult struct {
	Queues    int   // queues cleaned
	Records   int   // stored records read
	Messages  int64 // messages removed
	Rewritten int   // records rewritten smaller
	Holes     int   // records removed whole
	Took      time.Duration
}

func (r *CompactionResult) add(o CompactionResult) {
	r.Queues += o.Queues
	r.Records += o.Records
	r.Messages += o.Messages
	r.Rewritten += o.Rewritten
	r.Holes += o.Holes
}

// RunCompaction cleans every compacted topic's queues that are due (all of
// them with force).
func (b *Broker) RunCompaction(ctx context.Context, force bool) (CompactionResult, error) {
	b.compaction.pass.Lock()
	defer b.compaction.pass.Unlock()
	start := time.Now()
	var res CompactionResult
	var errs []error
	for _, t := range b.Topics(true) {
		if !t.Config.Compacted() {
			continue
		}
		for _, q := range t.Queues {
			r, err := b.compactQueue(ctx, t, q, force)
			res.add(r)
			if err != nil && !errors.Is(err, model.ErrUnknownQueue) {
				errs = append(errs, err)
			}
		}
	}
	res.Took = time.Since(start)
	if res.Queues > 0 {
		b.log.Info("compaction pass", "queues", res.Queues, "records_read", res.Records, "messages_removed", res.Messages,
			"records_rewritten", res.Rewritten, "records_removed", res.Holes, "took", res.Took)
	}
	return res, errors.Join(errs...)
}

func (b *Broker) compactTopics(ctx context.Context) error {
	_, err := b.RunCompaction(ctx, false)
	return err
}

// compactQueue cleans one queue if it is due.
func (b *Broker) compactQueue(ctx context.Context, t *Topic, q model.QueueID, force bool) (CompactionResult, error) {
	var res CompactionResult
	cc := t.Config.compaction()
	start, hw, _, err := b.engine.Offsets(q)
	if err != nil {
		return res, err
	}
	now := b.opts.Now()
	end := b.LastStable(q, hw)
	if cc.minLag > 0 {
		if off, err := b.engine.OffsetForTime(q, now.Add(-cc.minLag).UnixMilli()); err == nil {
			end = min(end, off)
		}
	}
	if end <= start {
		return res, nil
	}
	b.compaction.mu.Lock()
	cleaned := max(b.compaction.cleaned[q], start)
	b.compaction.mu.Unlock()
	if !force && !b.compactionDue(q, cleaned, end, cc, now) {
		return res, nil
	}
	latest, n, err := b.latestByKey(q, start, end)
	res.Records = n
	if err != nil {
		return res, err
	}
	horizon := now.Add(-cc.deleteRetention).UnixMilli()
	complete, err := b.rewriteQueue(ctx, t, q, start, end, hw, latest, horizon, &res)
	if err != nil {
		return res, err
	}
	res.Queues = 1
	if complete {
		// Otherwise a record moved under the pass (garbage collection):
		// the next pass does it again.
		b.compaction.mu.Lock()
		b.compaction.cleaned[q] = end
		b.compaction.mu.Unlock()
	}
	return res, nil
}

// compactionDue: the bytes since the last pass reach the dirty ratio, or
// the oldest of them passed the maximum lag.
func (b *Broker) compactionDue(q model.QueueID, cleaned, end model.QueueOffset, cc compactionConfig, now time.Time) bool {
	if cleaned >= end {
		return false
	}
	total, err := b.engine.QueueBytes(q)
	if err != nil || total == 0 {
		return false
	}
	dirty, oldest, err := b.engine.BytesBetween(q, cleaned, end)
	if err != nil {
		return false
	}
	if float64(dirty) >= cc.dirtyRatio*float64(total) {
		return true
	}
	return cc.maxLag < time.Duration(math.MaxInt64) && oldest > 0 && now.Sub(time.UnixMilli(oldest)) > cc.maxLag
}

// rocketmqKey is a RocketMQ message's compaction key: the first of its
// space-separated KEYS.
func rocketmqKey(keys []byte) []byte {
	k, _, _ := bytes.Cut(bytes.TrimSpace(keys), []byte(" "))
	return k
}

// eachStored calls fn with the stored records of q holding offsets in
// [from, to); the record's bytes are valid during fn only.
func (b *Broker) eachStored(q model.QueueID, from, to model.QueueOffset, fn func(*StoredRecord) error) (int, error) {
	n := 0
	for off := from; off < to; {
		res, err := b.engine.Read(q, off, storage.ReadOptions{MaxBytes: 4 << 20, MaxRecords: 1024})
		if err != nil {
			return n, err
		}
		for i := range res.Records {
			r := &res.Records[i]
			if r.BaseOffset >= to {
				break
			}
			n++
			if err := fn(r); err != nil {
				res.Release()
				return n, err
			}
		}
		next := res.NextOffset
		res.Release()
		if next <= off {
			break
		}
		off = next
	}
	return n, nil
}

// abortedOrControl reports a Kafka batch that is a transaction marker
// (control) and one of an aborted transaction.
func (b *Broker) abortedOrControl(q model.QueueID, r *StoredRecord) (control, aborted bool) {
	if r.Format != model.FormatKafkaBatchV2 || len(r.Payload) < kbatch.HeaderSize {
		return false, false
	}
	h := kbatch.ReadHeader(r.Payload)
	if h.Attributes&kbatch.AttrTransactional == 0 {
		return false, false
	}
	if h.Attributes&kbatch.AttrControl != 0 {
		return true, false
	}
	return false, b.opts.KafkaTxns.IsAborted(q, h.ProducerID, r.BaseOffset)
}

// latestByKey maps every key in [start, end) to its newest offset.
func (b *Broker) latestByKey(q model.QueueID, start, end model.QueueOffset) (map[string]model.QueueOffset, int, error) {
	latest := map[string]model.QueueOffset{}
	n, err := b.eachStored(q, start, end, func(r *StoredRecord) error {
		switch r.Format {
		case model.FormatKafkaBatchV2:
			if control, aborted := b.abortedOrControl(q, r); control || aborted {
				return nil
			}
			return b.batches.Records(r.Payload, false, func(rec *kbatch.Record) bool {
				if off := r.BaseOffset + model.QueueOffset(rec.OffsetDelta); !rec.KeyNull && off >= start && off < end {
					latest[string(rec.Key)] = off
				}
				return true
			})
		case model.FormatMessage:
			m, err := DecodeMessage(r.Payload)
			if err == nil {
				if k := rocketmqKey(m.Key); len(k) > 0 {
					latest[string(k)] = r.BaseOffset
				}
			}
		}
		return nil
	})
	return latest, n, err
}

// rewriteBatch is how many rewrites go to the engine at once.
const rewriteBatch = 256

// rewriteQueue rewrites the records of [start, end) that hold superseded
// messages; the record ending at hw (the newest) is never removed whole.
// It reports whether every rewrite applied (one whose record moved
// meanwhile does not).
func (b *Broker) rewriteQueue(ctx context.Context, t *Topic, q model.QueueID, start, end, hw model.QueueOffset,
	latest map[string]model.QueueOffset, horizon int64, res *CompactionResult) (bool, error) {
	var rws []storage.Rewrite
	complete := true
	flush := func() error {
		if len(rws) == 0 {
			return nil
		}
		n, err := b.engine.RewriteRecords(ctx, q, rws)
		complete = complete && n == len(rws)
		rws = rws[:0]
		return err
	}
	_, err := b.eachStored(q, start, end, func(r *StoredRecord) error {
		if r.BaseOffset < start {
			return nil // straddles the start
		}
		newest := r.BaseOffset+model.QueueOffset(r.Count) >= hw
		var payload []byte
		removed := int64(0)
		switch r.Format {
		case model.FormatKafkaBatchV2:
			control, aborted := b.abortedOrControl(q, r)
			if control {
				return nil
			}
			if !aborted {
				out, kept, err := b.batches.Filter(r.Payload, func(rec *kbatch.Record) bool {
					if rec.KeyNull {
						return true
					}
					off := r.BaseOffset + model.QueueOffset(rec.OffsetDelta)
					return latest[string(rec.Key)] == off && !(rec.ValueNull && rec.Timestamp < horizon)
				})
				if err != nil {
					b.log.Warn("compaction skips a batch it cannot decode", "topic", t.FullName, "offset", r.BaseOffset, "err", err)
					return nil
				}
				if kept == int(kbatch.ReadHeader(r.Payload).NumRecords) {
					return nil
				}
				payload = out
				removed = int64(kbatch.ReadHeader(r.Payload).NumRecords) - int64(kept)
			} else {
				removed = int64(kbatch.ReadHeader(r.Payload).NumRecords)
			}
		case model.FormatMessage:
			m, err := DecodeMessage(r.Payload)
			if err != nil {
				return nil
			}
			k := rocketmqKey(m.Key)
			if len(k) == 0 || latest[string(k)] == r.BaseOffset {
				return nil
			}
			removed = 1
		default:
			return nil
		}
		if newest && payload == nil {
			return nil // the newest record is never removed whole
		}
		rw := storage.Rewrite{Base: r.BaseOffset}
		if payload != nil {
			rec := &storage.Record{Format: r.Format, Flags: r.Flags &^ (storage.FlagRelocated | storage.FlagCompacted),
				Count: r.Count, Timestamp: r.Timestamp, StoreTime: r.StoreTime, TagHash: r.TagHash, Payload: payload}
			_ = r.EachKey(func(k storage.Key) { rec.Keys = append(rec.Keys, storage.Key{Delta: k.Delta, Key: bytes.Clone(k.Key)}) })
			rw.Record = rec
			res.Rewritten++
		} else {
			res.Holes++
		}
		res.Messages += removed
		rws = append(rws, rw)
		if len(rws) >= rewriteBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	err = flush()
	return complete, err
}

// CompactionState is how far each queue of a compacted topic was cleaned
// (-1: not since the node started).
func (b *Broker) CompactionState(t *Topic) []int64 {
	b.compaction.mu.Lock()
	defer b.compaction.mu.Unlock()
	out := make([]int64, len(t.Queues))
	for i, q := range t.Queues {
		out[i] = -1
		if off, ok := b.compaction.cleaned[q]; ok {
			out[i] = int64(off)
		}
	}
	return out
}
