// Package memory manages the process's heap for a long-lived server: it
// gives memory back to the system once a storm is over, and keeps a soft
// memory limit that follows the live heap.
package memory

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Memory given back after a storm: with GOGC well above 100 the runtime
// keeps the heap it grew to until enough new allocation triggers a
// collection, which an idle broker never does — so after a burst of large
// requests the node would sit on hundreds of MiB it no longer uses (most
// of it garbage no collection has found yet). Every returnMemoryCheck,
// once no collection ran for returnMemoryQuiet (the node is quiet), the
// heap is collected (twice, so that pooled buffers go too) and its free
// pages returned to the operating system when it holds returnMemorySlack
// more than the last return left, or when fewer than half the goroutines
// run than then (and returnMemoryGoroutines fewer at least): a return made
// while a flood of connections was held cannot free what they hold, and
// once they close their memory is garbage without the heap growing.
const (
	returnMemoryCheck      = 5 * time.Second
	returnMemoryQuiet      = 10 * time.Second
	returnMemorySlack      = 32 << 20
	returnMemoryGoroutines = 100
)

// ReturnIdle gives idle memory back as described above, until ctx ends.
func ReturnIdle(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(returnMemoryCheck)
	defer t.Stop()
	var leftHeld uint64    // what the last return left held
	var leftGoroutines int // how many goroutines ran then
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		held := ms.HeapSys - ms.HeapReleased
		quiet := time.Since(time.Unix(0, int64(ms.LastGC))) >= returnMemoryQuiet
		goroutines := runtime.NumGoroutine()
		grown := held >= leftHeld+returnMemorySlack
		closed := 2*goroutines <= leftGoroutines && goroutines+returnMemoryGoroutines <= leftGoroutines
		if !quiet || !grown && !closed {
			continue
		}
		// Two collections: the first moves what sync.Pools hold (frame
		// buffers a flood of large requests filled) to their victim
		// caches, the second frees it; then the free pages go back.
		runtime.GC()
		debug.FreeOSMemory()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		leftHeld, leftGoroutines = after.HeapSys-after.HeapReleased, goroutines
		log.Info("returned idle memory to the system", "held_mib", held>>20, "now_mib", leftHeld>>20, "goroutines", goroutines)
	}
}

// The automatic memory limit (memory_limit 0): the collector target
// (gc_percent, 400 on a single node) lets the heap grow to five times what
// is live between collections, which is cheap while little is live (a
// node producing at full speed keeps ~20 MiB live, ~110 MiB in all); but
// a flood of connections and large requests makes much live and much
// garbage at once, and the heap — the node's memory — would peak at five
// times what the flood holds. A soft limit of twice the live heap, never
// less than the live heap plus autoLimitHeadroom nor less than
// autoLimitFloor, leaves a busy node's collector alone and makes it run
// sooner when a flood grows the heap.
const (
	autoLimitCheck    = time.Second
	autoLimitFloor    = 224 << 20
	autoLimitHeadroom = 128 << 20
)

// TrackLimit keeps the process's soft memory limit at the automatic
// one, following the live heap, until ctx ends (then it removes the
// limit). It owns the process's memory limit: rosetta serve runs it when
// neither memory_limit nor GOMEMLIMIT sets one.
func TrackLimit(ctx context.Context, log *slog.Logger) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(autoLimitCheck)
	defer t.Stop()
	defer debug.SetMemoryLimit(math.MaxInt64)
	var cur int64
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live := int64(sample[0].Value.Uint64())
			limit := max(autoLimitFloor, live+max(live, autoLimitHeadroom))
			if diff := limit - cur; cur == 0 || diff > cur/8 || -diff > cur/8 {
				debug.SetMemoryLimit(limit)
				log.Debug("memory limit follows the live heap", "live_mib", live>>20, "limit_mib", limit>>20)
				cur = limit
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
