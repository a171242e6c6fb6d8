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
// returnMemoryEvery, when no collection ran for that long (the node is
// quiet) and more than returnMemoryOver bytes of heap are held, the heap
// is collected and its free pages returned to the operating system.
const (
	returnMemoryEvery = 30 * time.Second
	returnMemoryOver  = 128 << 20
)

// returnMemory runs until ctx ends.
func returnMemory(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(returnMemoryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		held := ms.HeapSys - ms.HeapReleased
		quiet := time.Since(time.Unix(0, int64(ms.LastGC))) >= returnMemoryEvery
		if held < returnMemoryOver || !quiet {
			continue
		}
		debug.FreeOSMemory()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		log.Info("returned idle memory to the system", "held_mib", held>>20, "now_mib", (after.HeapSys-after.HeapReleased)>>20)
	}
}
