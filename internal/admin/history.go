package admin

import (
	"context"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
)

// History samples what the console charts — each topic's end offsets and
// each group's committed offsets and lag — every interval, keeping the
// last few minutes: message rates in and out, lag over time, and groups
// that stopped committing while behind.
type History struct {
	b        *broker.Broker
	interval time.Duration
	keep     int
	mu       sync.Mutex
	samples  []historySample // oldest first
}

type historySample struct {
	at        time.Time
	topics    map[string]int64 // topic (full name) → sum of its queues' end offsets
	committed map[string]int64 // group → sum of its committed offsets
	lag       map[string]int64 // group → lag
}

// Rate and stall windows.
const (
	rateWindow  = time.Minute     // rates are averaged over the last minute
	stuckWindow = 2 * time.Minute // a group behind that committed nothing for this long is stuck
)

// NewHistory samples b every interval (10 s when 0), keeping five minutes.
func NewHistory(b *broker.Broker, interval time.Duration) *History {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	return &History{b: b, interval: interval, keep: int(5*time.Minute/interval) + 1}
}

// Run samples until ctx ends.
func (h *History) Run(ctx context.Context) {
	if h == nil {
		return
	}
	t := time.NewTicker(h.interval)
	defer t.Stop()
	h.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.sample(now)
		}
	}
}

func (h *History) sample(now time.Time) {
	s := historySample{at: now, topics: map[string]int64{}, committed: map[string]int64{}, lag: map[string]int64{}}
	for _, t := range h.b.Topics(true) {
		var sum int64
		for i := range t.Queues {
			if _, hw, _, err := h.b.Offsets(t.Name, int32(i)); err == nil {
				sum += int64(hw)
			}
		}
		s.topics[t.FullName] = sum
	}
	refs := queueRefs(h.b)
	for _, g := range h.b.OffsetGroups() {
		d := groupDetail(h.b, refs, g)
		var sum int64
		for _, o := range d.Offsets {
			sum += o.Committed
		}
		s.committed[g], s.lag[g] = sum, d.Lag
	}
	h.mu.Lock()
	h.samples = append(h.samples, s)
	if len(h.samples) > h.keep {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-h.keep:]...)
	}
	h.mu.Unlock()
}

// window returns the oldest sample within d of the newest that has key
// (has reports whether a sample does), and the newest; ok is false unless
// both exist and differ.
func (h *History) window(d time.Duration, has func(historySample) bool) (old, cur historySample, ok bool) {
	if h == nil || len(h.samples) < 2 {
		return old, cur, false
	}
	cur = h.samples[len(h.samples)-1]
	if !has(cur) {
		return old, cur, false
	}
	for _, s := range h.samples {
		if cur.at.Sub(s.at) <= d && has(s) {
			return s, cur, s.at.Before(cur.at)
		}
	}
	return old, cur, false
}

// perSecond is the rate of a counter between two samples.
func perSecond(from, to int64, old, cur historySample) float64 {
	if to < from { // a topic deleted and made again, offsets reset
		return 0
	}
	return float64(to-from) / cur.at.Sub(old.at).Seconds()
}

// TopicRate is a topic's message rate in over the last minute (0 unknown).
func (h *History) TopicRate(fullName string) float64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old, cur, ok := h.window(rateWindow, func(s historySample) bool { _, ok := s.topics[fullName]; return ok })
	if !ok {
		return 0
	}
	return perSecond(old.topics[fullName], cur.topics[fullName], old, cur)
}

// GroupRate is a group's consumption rate over the last minute (committed
// offsets per second), and whether it is stuck: behind at every sample of
// the last two minutes without committing anything.
func (h *History) GroupRate(group string) (rate float64, stuck bool) {
	if h == nil {
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	has := func(s historySample) bool { _, ok := s.committed[group]; return ok }
	if old, cur, ok := h.window(rateWindow, has); ok {
		rate = perSecond(old.committed[group], cur.committed[group], old, cur)
	}
	old, cur, ok := h.window(stuckWindow, has)
	if ok && cur.at.Sub(old.at) >= stuckWindow-h.interval {
		stuck = true
		for _, s := range h.samples {
			if s.at.Before(old.at) {
				continue
			}
			c, has := s.committed[group]
			if !has || s.lag[group] == 0 || c != cur.committed[group] {
				stuck = false
				break
			}
		}
	}
	return rate, stuck
}

// LagHistory is a group's lag at each sample kept.
func (h *History) LagHistory(group string) []apiv1.LagPoint {
	out := []apiv1.LagPoint{}
	if h == nil {
		return out
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.samples {
		if lag, ok := s.lag[group]; ok {
			out = append(out, apiv1.LagPoint{TimeMs: s.at.UnixMilli(), Lag: lag})
		}
	}
	return out
}
