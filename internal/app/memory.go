package app

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"
)

// Memory given back after a storm: with GOGC well above 100 the runtime
// keeps the heap it grew to until enough new allocation triggers a
// collection, which an idle broker never does — so after a burst of large
// requests the node would sit on hundreds of MiB it no longer uses. Every
// returnMemoryCheck, once no collection ran for returnMemoryQuiet (the node
// is quiet) and the heap holds more than returnMemorySlack beyond what is
// live and beyond what the last return left, the heap is collected and its
// free pages returned to the operating system.
const (
	returnMemoryCheck = 5 * time.Second
	returnMemoryQuiet = 10 * time.Second
	returnMemorySlack = 32 << 20
)

// returnMemory runs until ctx ends.
func returnMemory(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(returnMemoryCheck)
	defer t.Stop()
	var leftHeld uint64 // what the last return left held
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
		if !quiet || held < ms.HeapAlloc+returnMemorySlack || held < leftHeld+returnMemorySlack {
			continue
		}
		debug.FreeOSMemory()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		leftHeld = after.HeapSys - after.HeapReleased
		log.Info("returned idle memory to the system", "held_mib", held>>20, "now_mib", leftHeld>>20)
	}
}
