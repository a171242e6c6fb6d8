package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
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
	body := make([]byte, o.Size)
	var next atomic.Int64
	var failed atomic.Value
	lats := make([][]time.Duration, o.Senders)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for s := 0; s < o.Senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for i := next.Add(1); i <= o.Messages && ctx.Err() == nil; i = next.Add(1) {
				due := start.Add(time.Minute + time.Duration(rand.Int64N(int64(o.Spread)))).UnixMilli()
				t0 := time.Now()
				_, _, err := b.AppendTimer(ctx, name, int32(i%8), model.Message{Body: body}, due)
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				lats[s] = append(lats[s], time.Since(t0))
			}
		}(s)
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		closeAll()
		return nil, err
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
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	r := &Report{Name: fmt.Sprintf("timer store: %d messages due over %v (from +1 min), %d schedulers, sync=%v", o.Messages, o.Spread, o.Senders, o.Sync),
		Records: int64(len(all)), Messages: int64(len(all)), Bytes: int64(len(all)) * int64(o.Size), Elapsed: el,
		CPU: cpuTime() - cpu0, Latencies: all}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	r.Extra = append(r.Extra,
		fmt.Sprintf("heap with all pending: %.1f MiB; after a restart with them pending: %.1f MiB", float64(heapPending)/(1<<20), float64(ms.HeapAlloc)/(1<<20)),
		fmt.Sprintf("restart (open, rebuild the timer lists from the index): %v", restart.Round(time.Millisecond)),
		"(latency: one AppendTimer call)")
	return r, nil
}
