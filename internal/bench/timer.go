package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// TimerOptions describe a timer-store workload run in process.
type TimerOptions struct {
	Dir      string
	Messages int64         // timer messages scheduled
	Spread   time.Duration // due times spread uniformly over now+Spread
	Size     int           // body bytes
	Senders  int           // concurrent schedulers
	Sync     bool          // sync durability
	// Deliver waits for every message to be delivered and reports the
	// lateness (store time in the topic minus due time); the due times
	// then start 2 s ahead instead of a minute.
	Deliver bool
}

// Timer schedules o.Messages timer messages due over the next o.Spread,
// reports the scheduling rate and the memory held with them pending, then
// reopens the broker and reports how long the restart takes with them.
func Timer(ctx context.Context, o TimerOptions) (*Report, error) {
	open := func() (*broker.Broker, func(), error) {
		e, err := openEngine(filepath.Join(o.Dir, "data"), o.Sync, 1<<30)
		if err != nil {
			return nil, nil, err
		}
		m, err := meta.OpenBolt(filepath.Join(o.Dir, "meta.db"))
		if err != nil {
			e.Close()
			return nil, nil, err
		}
		b, err := broker.New(ctx, e, m, broker.Options{})
		if err != nil {
			m.Close()
			e.Close()
			return nil, nil, err
		}
		return b, func() { b.Close(); m.Close(); e.Close() }, nil
	}
	b, closeAll, err := open()
	if err != nil {
		return nil, err
	}
	name := model.TopicName{Tenant: model.DefaultTenant, Namespace: model.DefaultNamespace, Topic: "timer-bench"}
	if _, err := b.CreateTopic(ctx, name, 8, broker.TopicConfig{}); err != nil {
		closeAll()
		return nil, err
	}
	body := make([]byte, max(o.Size, 8))
	cpu0 := cpuTime()
	start := time.Now()
	lead := time.Minute
	if o.Deliver {
		lead = 2 * time.Second
	}
	all, err := runSenders(ctx, o.Messages, o.Senders, func(i int64) error {
		due := start.Add(lead + time.Duration(rand.Int64N(int64(o.Spread)))).UnixMilli()
		body := append([]byte(nil), body...)
		binary.BigEndian.PutUint64(body, uint64(due))
		_, _, err := b.AppendTimer(ctx, name, int32(i%8), model.Message{Body: body}, due)
		return err
	})
	el := time.Since(start)
	if err != nil {
		closeAll()
		return nil, err
	}
	var lateness []time.Duration
	if o.Deliver {
		if lateness, err = timerLateness(ctx, b, name, o.Messages, start.Add(o.Spread+10*time.Second)); err != nil {
			closeAll()
			return nil, err
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapPending := ms.HeapAlloc
	closeAll()
	t0 := time.Now()
	b, closeAll, err = open()
	if err != nil {
		return nil, err
	}
	restart := time.Since(t0)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	closeAll()
	r := opsReport(fmt.Sprintf("timer store: %d messages due over %v (from +1 min), %d schedulers, sync=%v", o.Messages, o.Spread, o.Senders, o.Sync),
		all, o.Size, el, cpu0)
	r.Extra = append(r.Extra,
		fmt.Sprintf("heap with all pending: %.1f MiB; after a restart with them pending: %.1f MiB", float64(heapPending)/(1<<20), float64(ms.HeapAlloc)/(1<<20)),
		fmt.Sprintf("restart (open, rebuild the timer lists from the index): %v", restart.Round(time.Millisecond)),
		"(latency: one AppendTimer call)")
	if len(lateness) > 0 {
		slices.Sort(lateness)
		q := func(p float64) time.Duration { return lateness[min(len(lateness)-1, int(p*float64(len(lateness))))] }
		r.Extra = append(r.Extra, fmt.Sprintf("delivery lateness (store time − due): p50 %v  p99 %v  max %v  (%d delivered)",
			q(0.5), q(0.99), lateness[len(lateness)-1], len(lateness)))
	}
	return r, nil
}

// timerLateness waits until n timer messages have reached the topic's queues
// and returns how late each arrived.
func timerLateness(ctx context.Context, b *broker.Broker, name model.TopicName, n int64, deadline time.Time) ([]time.Duration, error) {
	next := make([]model.QueueOffset, 8)
	var out []time.Duration
	for int64(len(out)) < n {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d timer messages delivered", len(out), n)
		}
		progressed := false
		for q := range next {
			res, err := b.Read(name, int32(q), next[q], broker.ReadOptions{MaxRecords: 1000})
			if err != nil {
				return nil, err
			}
			for _, r := range res.Records {
				m, err := broker.DecodeMessage(r.Payload)
				if err == nil && len(m.Body) >= 8 {
					out = append(out, time.Duration(r.StoreTime-int64(binary.BigEndian.Uint64(m.Body)))*time.Millisecond)
				}
				next[q] = r.BaseOffset + 1
				progressed = true
			}
			res.Release()
		}
		if !progressed {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return out, nil
}
