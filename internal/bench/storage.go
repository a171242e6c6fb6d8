package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// StorageOptions describe an engine workload.
type StorageOptions struct {
	Dir            string
	Sync           bool
	Messages       int64 // total messages to append
	Size           int   // bytes per message
	MsgsPerRecord  int   // messages packed in one record (a Kafka batch)
	RecordsPerCall int   // records per Append call (a RocketMQ batch)
	Queues         int
	Appenders      int
	SegmentSize    int64
	Keys           bool // give every record a key (exercises the key index)
	KeepData       bool
	CrashAtEnd     bool // SIGKILL this process after the workload (restart benchmark)
}

// openEngine opens an engine for benchmarking with the guard relaxed.
func openEngine(dir string, syncMode bool, segment int64) (*storage.Engine, error) {
	c := storage.DefaultConfig(dir)
	if syncMode {
		c.Durability = storage.DurabilitySync
	}
	if segment > 0 {
		c.SegmentSize = segment
	}
	c.MinFreeBytes = 256 << 20
	c.MinFreeRatio = 0.01
	c.RetentionInterval = time.Hour
	return storage.Open(c)
}

// Storage runs an append workload against the engine.
func Storage(ctx context.Context, o StorageOptions) (*Report, error) {
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "rosetta-bench-")
		if err != nil {
			return nil, err
		}
		o.Dir = d
	}
	if !o.KeepData && !o.CrashAtEnd {
		defer os.RemoveAll(o.Dir)
	}
	o.MsgsPerRecord = max(o.MsgsPerRecord, 1)
	o.RecordsPerCall = max(o.RecordsPerCall, 1)
	o.Queues = max(o.Queues, 1)
	o.Appenders = max(o.Appenders, 1)
	e, err := openEngine(filepath.Join(o.Dir, "storage"), o.Sync, o.SegmentSize)
	if err != nil {
		return nil, err
	}
	ids := make([]model.QueueID, o.Queues)
	for i := range ids {
		ids[i] = model.QueueID(i + 1)
	}
	if err := e.CreateQueues(ctx, ids); err != nil {
		e.Close()
		return nil, err
	}
	payload := make([]byte, o.Size*o.MsgsPerRecord)
	_, _ = rand.Read(payload)
	calls := o.Messages / int64(o.MsgsPerRecord*o.RecordsPerCall)
	var next atomic.Int64
	lats := make([][]time.Duration, o.Appenders)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	runtime.GC()
	cpu0 := cpuTime()
	start := time.Now()
	for g := 0; g < o.Appenders; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			recs := make([]*storage.Record, o.RecordsPerCall)
			backing := make([]storage.Record, o.RecordsPerCall)
			var key [16]byte
			for {
				n := next.Add(1) - 1
				if n >= calls || ctx.Err() != nil {
					return
				}
				q := model.QueueID(n%int64(o.Queues) + 1)
				for i := range recs {
					backing[i] = storage.Record{Queue: q, Count: uint32(o.MsgsPerRecord), Payload: payload}
					if o.Keys {
						copy(key[:], fmt.Sprintf("k%015d", n*int64(o.RecordsPerCall)+int64(i)))
						backing[i].Keys = []storage.Key{{Key: key[:]}}
					}
					recs[i] = &backing[i]
				}
				t0 := time.Now()
				if err := e.Append(ctx, recs); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lats[g] = append(lats[g], time.Since(t0))
			}
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	if err, _ := firstErr.Load().(error); err != nil {
		e.Close()
		return nil, err
	}
	cur, peak, anon := rss()
	r := &Report{
		Name: fmt.Sprintf("storage append: %d B msgs, %d msgs/record, %d records/call, %d queues, %d appenders, %s",
			o.Size, o.MsgsPerRecord, o.RecordsPerCall, o.Queues, o.Appenders, map[bool]string{true: "sync", false: "async"}[o.Sync]),
		Records:  calls * int64(o.RecordsPerCall),
		Messages: calls * int64(o.RecordsPerCall*o.MsgsPerRecord),
		Bytes:    calls * int64(o.RecordsPerCall) * int64(len(payload)),
		Elapsed:  elapsed, CPU: cpu, RSSBytes: cur, PeakRSS: peak, AnonBytes: anon,
	}
	for _, l := range lats {
		r.Latencies = append(r.Latencies, l...)
	}
	ls := e.LogStats()
	r.Extra = append(r.Extra, fmt.Sprintf("log            %d segments, %.1f MiB", ls.Segments, float64(ls.Bytes)/(1<<20)))
	if o.CrashAtEnd {
		r.Print(os.Stdout)
		fmt.Println("crashing on purpose (SIGKILL) to leave an unclean data dir")
		_ = syncKill()
	}
	if err := e.Close(); err != nil {
		return r, err
	}
	return r, nil
}

// Restart measures how long an engine takes to open dir and accept a write.
func Restart(ctx context.Context, dir string, syncMode bool) (*Report, error) {
	cpu0 := cpuTime()
	start := time.Now()
	e, err := openEngine(filepath.Join(dir, "storage"), syncMode, 0)
	if err != nil {
		return nil, err
	}
	opened := time.Since(start)
	ids := e.QueueIDs()
	if len(ids) == 0 {
		e.Close()
		return nil, fmt.Errorf("no queues in %s", dir)
	}
	if err := e.Append(ctx, []*storage.Record{{Queue: ids[len(ids)/2], Count: 1, Payload: []byte("after restart")}}); err != nil {
		e.Close()
		return nil, err
	}
	accepting := time.Since(start)
	cur, peak, anon := rss()
	ls := e.LogStats()
	r := &Report{Name: "storage restart", Elapsed: accepting, CPU: cpuTime() - cpu0, RSSBytes: cur, PeakRSS: peak, AnonBytes: anon,
		Extra: []string{
			fmt.Sprintf("opened in      %v", opened.Round(time.Millisecond)),
			fmt.Sprintf("first write    %v after start", accepting.Round(time.Millisecond)),
			fmt.Sprintf("data           %.2f GiB in %d segments, %d queues", float64(ls.Bytes)/(1<<30), ls.Segments, len(ids)),
		}}
	return r, e.Close()
}

// IdleQueueMemory measures heap bytes per idle queue by creating n queues.
func IdleQueueMemory(ctx context.Context, n int) (float64, error) {
	dir, err := os.MkdirTemp("", "rosetta-bench-idle-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	e, err := openEngine(dir, false, 64<<20)
	if err != nil {
		return 0, err
	}
	defer e.Close()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	ids := make([]model.QueueID, n)
	for i := range ids {
		ids[i] = model.QueueID(i + 1)
	}
	if err := e.CreateQueues(ctx, ids); err != nil {
		return 0, err
	}
	for q := 1; q <= n; q++ {
		if err := e.Append(ctx, []*storage.Record{{Queue: model.QueueID(q), Count: 1, Payload: []byte("x")}}); err != nil {
			return 0, err
		}
	}
	// Let the flusher write the tails, as it would for queues gone idle.
	time.Sleep(600 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	return float64(m1.HeapAlloc-m0.HeapAlloc) / float64(n), nil
}
