package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Delay levels: a message sent with level n (1-18 by default) is delivered
// to its topic after Options.DelayLevels[n-1]. A delay level is a special
// case of a timer message: it waits in the timer store (timer.go), due at
// the send time plus the level's delay.
//
// Data directories written before the timer store keep delayed messages in
// an internal topic with one queue per level (each in due-time order): one
// loop per level still drains it, delivering the head of its queue when due
// and recording progress as an offset commit of an internal group.

// DefaultDelayLevels are RocketMQ's 18 default delay levels.
var DefaultDelayLevels = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
	6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
}

// Properties (headers) that carry a delayed message's destination, and its
// delay level, as RocketMQ names them.
const (
	HeaderRealTopic  = "REAL_TOPIC"
	HeaderRealQueue  = "REAL_QID"
	HeaderDelayLevel = "DELAY"
)

// scheduleTopic holds delayed messages, queue i for level i+1.
var scheduleTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "schedule"}

// scheduleGroup is the internal group whose offsets are the delivery
// cursors.
const scheduleGroup = "__rosetta_schedule"

// ErrInvalidDelayLevel is a delay level below 1.
var ErrInvalidDelayLevel = errors.New("invalid delay level")

// startDelays creates the schedule topic if needed (growing it when more
// levels are configured than it has queues) and starts one delivery loop
// per queue. Queues beyond the configured levels (after levels were
// removed) keep draining with the last level's delay.
func (b *Broker) startDelays(ctx context.Context, bctx context.Context) error {
	levels := b.opts.DelayLevels
	t, err := b.EnsureInternalTopic(ctx, scheduleTopic, len(levels), TopicConfig{RetentionMs: -1})
	if err != nil {
		return fmt.Errorf("schedule topic: %w", err)
	}
	for level := 1; level <= t.QueueCount(); level++ {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.deliverLevel(bctx, t, level)
		}()
	}
	return nil
}

// AppendDelayed stores m to be appended to queue index of topic after the
// delay of level (from 1; past the last level is clamped, as RocketMQ
// does), in the timer store. It returns the message's place there.
func (b *Broker) AppendDelayed(ctx context.Context, topic model.TopicName, index int32, m model.Message, level int) (model.QueueID, model.QueueOffset, error) {
	if level < 1 {
		return 0, 0, fmt.Errorf("%w: %d", ErrInvalidDelayLevel, level)
	}
	level = min(level, len(b.opts.DelayLevels))
	due := b.opts.Now().Add(b.opts.DelayLevels[level-1]).UnixMilli()
	return b.AppendTimer(ctx, topic, index, m, due)
}

// DelayLevels returns the configured delay of each level, level 1 first.
func (b *Broker) DelayLevels() []time.Duration { return b.opts.DelayLevels }

// ParseDelayLevels reads delay levels written as RocketMQ's
// messageDelayLevel setting: space-separated durations with a unit of s,
// m, h or d ("1s 5s 10s 30s 1m ... 2h").
func ParseDelayLevels(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Fields(s) {
		unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}[f[len(f)-1]]
		n, err := strconv.ParseInt(f[:len(f)-1], 10, 64)
		if unit == 0 || err != nil || n <= 0 || n > int64(365*24*time.Hour/unit) {
			return nil, fmt.Errorf("%w: delay level %q: want a positive number and a unit of s, m, h or d", model.ErrInvalidConfig, f)
		}
		out = append(out, time.Duration(n)*unit)
	}
	if len(out) == 0 || len(out) > 64 {
		return nil, fmt.Errorf("%w: %d delay levels: want 1 to 64", model.ErrInvalidConfig, len(out))
	}
	return out, nil
}

// withoutHeaders drops the headers named keys.
func withoutHeaders(hs []model.Header, keys ...string) []model.Header {
	out := hs[:0:0]
	for _, h := range hs {
		drop := false
		for _, k := range keys {
			drop = drop || h.Key == k
		}
		if !drop {
			out = append(out, h)
		}
	}
	return out
}

// deliverLevel runs one level's delivery loop until ctx ends.
func (b *Broker) deliverLevel(ctx context.Context, t *Topic, level int) {
	idx := int32(level - 1)
	queue := t.Queues[idx]
	delay := b.opts.DelayLevels[min(int(idx), len(b.opts.DelayLevels)-1)]
	cursor := model.QueueOffset(0)
	if got, err := b.FetchOffsets(scheduleGroup, scheduleTopic); err == nil {
		if c, ok := got[idx]; ok {
			cursor = c.Offset
		}
	}
	retry := func() bool { return sleepCtx(ctx, time.Second) }
	for ctx.Err() == nil {
		start, hw, _, err := b.engine.Offsets(queue)
		if err != nil {
			return
		}
		cursor = max(cursor, start)
		if cursor >= hw {
			if err := b.engine.Wait(ctx, map[model.QueueID]model.QueueOffset{queue: cursor}); err != nil && ctx.Err() == nil && !retry() {
				return
			}
			continue
		}
		res, err := b.engine.Read(queue, cursor, storage.ReadOptions{MaxRecords: 64})
		if err != nil {
			b.log.Warn("delay level read failed", "level", level, "err", err)
			if !retry() {
				return
			}
			continue
		}
		advanced := false
		for i := range res.Records {
			r := &res.Records[i]
			if due := time.UnixMilli(r.StoreTime).Add(delay); b.opts.Now().Before(due) {
				break
			}
			if err := b.deliverDelayed(ctx, r); err != nil {
				b.log.Warn("delayed message not delivered yet", "level", level, "offset", r.BaseOffset, "err", err)
				break
			}
			cursor = r.BaseOffset + model.QueueOffset(r.Count)
			advanced = true
		}
		var nextDue time.Time
		if !advanced && len(res.Records) > 0 {
			nextDue = time.UnixMilli(res.Records[0].StoreTime).Add(delay)
		}
		res.Release()
		if advanced {
			if err := b.CommitOffsets(ctx, scheduleGroup, scheduleTopic, map[int32]OffsetCommit{idx: {Offset: cursor, LeaderEpoch: -1}}); err != nil && ctx.Err() == nil {
				b.log.Warn("delay cursor not committed", "level", level, "err", err)
			}
			continue
		}
		wait := time.Second
		if !nextDue.IsZero() {
			wait = max(nextDue.Sub(b.opts.Now()), time.Millisecond)
		}
		if !sleepCtx(ctx, wait) {
			return
		}
	}
}

// deliverDelayed appends a due message to its real topic and queue, without
// its DELAY level.
func (b *Broker) deliverDelayed(ctx context.Context, r *StoredRecord) error {
	m, err := DecodeMessage(r.Payload)
	if err != nil {
		b.log.Error("corrupt delayed message dropped", "offset", r.BaseOffset, "err", err)
		return nil
	}
	realTopic, _ := m.Header(HeaderRealTopic)
	realQueue, _ := m.Header(HeaderRealQueue)
	name, err := model.ParseTopicName(string(realTopic))
	if err != nil {
		b.log.Error("delayed message without a valid destination dropped", "offset", r.BaseOffset, "topic", string(realTopic))
		return nil
	}
	q, _ := strconv.Atoi(string(realQueue))
	m.Headers = withoutHeaders(m.Headers, HeaderDelayLevel)
	// m aliases the log view; AppendMessages encodes it before returning.
	_, err = b.AppendMessages(ctx, name, int32(q), []model.Message{m})
	if errors.Is(err, model.ErrUnknownTopic) || errors.Is(err, model.ErrUnknownQueue) {
		b.log.Warn("delayed message for a deleted topic dropped", "topic", name.String())
		return nil
	}
	return err
}

// sleepCtx sleeps for d unless ctx ends first; it reports whether ctx is
// still alive.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
