package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// GCOptions describe a garbage-collection workload run in process.
type GCOptions struct {
	Dir      string
	LogBytes int64   // bytes written before collecting
	Live     float64 // fraction of them that stays live
	Record   int     // bytes per record
	Segment  int64
	Rate     int64 // GC bytes per second (0: unpaced)
	Senders  int   // concurrent producers measured during the pass
	Size     int   // their record size
}

// GC fills a log whose records are Live-fraction live, interleaved with
// dead ones, then measures foreground append latency without and with a
// concurrent garbage-collection pass, and the pass's throughput and write
// amplification.
func GC(ctx context.Context, o GCOptions) (*Report, error) {
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "rosetta-gc-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		o.Dir = d
	}
	c := storage.DefaultConfig(filepath.Join(o.Dir, "data"))
	c.Durability = storage.DurabilitySync
	c.SegmentSize = o.Segment
	c.MinFreeBytes, c.MinFreeRatio = 0, 0
	c.RetentionInterval = time.Hour
	c.GCMinorInterval, c.GCMajorInterval = -1, -1
	c.GCBytesPerSecond = o.Rate
	e, err := storage.Open(c)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	const kept, dead, fg = model.QueueID(1), model.QueueID(2), model.QueueID(3)
	if err := e.CreateQueues(ctx, []model.QueueID{kept, dead, fg}); err != nil {
		return nil, err
	}
	payload := make([]byte, o.Record)
	perTen := int(o.Live*10 + 0.5)
	fill0 := time.Now()
	var written int64
	for i := 0; written < o.LogBytes; i++ {
		recs := make([]*storage.Record, 0, 64)
		for j := 0; j < 64; j++ {
			q := dead
			if (i*64+j)%10 < perTen {
				q = kept
			}
			recs = append(recs, &storage.Record{Queue: q, Count: 1, Payload: payload})
		}
		if err := e.AppendWith(ctx, recs, storage.AppendOptions{NoWait: true}); err != nil {
			return nil, err
		}
		written += int64(64 * o.Record)
	}
	fill := time.Since(fill0)
	_, _, end, err := e.Offsets(dead)
	if err != nil {
		return nil, err
	}
	if err := e.SetStartOffset(dead, end); err != nil {
		return nil, err
	}
	// Foreground appends for a fixed time, without and then with a pass.
	body := make([]byte, o.Size)
	measure := func(stop <-chan struct{}) []time.Duration {
		var mu sync.Mutex
		var all []time.Duration
		var wg sync.WaitGroup
		for range o.Senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lats []time.Duration
				for {
					select {
					case <-stop:
						mu.Lock()
						all = append(all, lats...)
						mu.Unlock()
						return
					default:
					}
					t0 := time.Now()
					if err := e.Append(ctx, []*storage.Record{{Queue: fg, Count: 1, Payload: body}}); err != nil {
						return
					}
					lats = append(lats, time.Since(t0))
				}
			}()
		}
		wg.Wait()
		return all
	}
	stop := make(chan struct{})
	go func() { time.Sleep(5 * time.Second); close(stop) }()
	quiet := measure(stop)
	logBefore := e.LogStats().Bytes
	stop = make(chan struct{})
	var res storage.GCResult
	var gcErr error
	go func() { res, gcErr = e.GC(ctx, 0.5); close(stop) }()
	busy := measure(stop)
	if gcErr != nil {
		return nil, gcErr
	}
	q := func(l []time.Duration, p float64) time.Duration {
		slices.Sort(l)
		if len(l) == 0 {
			return 0
		}
		return l[min(len(l)-1, int(p*float64(len(l))))]
	}
	freed := logBefore - e.LogStats().Bytes + res.Copied
	r := &Report{Name: fmt.Sprintf("garbage collection: %d MiB log, %.0f%% live, %d-byte records, %d MiB segments, pace %d MiB/s",
		o.LogBytes>>20, o.Live*100, o.Record, o.Segment>>20, o.Rate>>20), Elapsed: res.Took}
	r.Extra = append(r.Extra,
		fmt.Sprintf("fill: %v (%.0f MB/s)", fill.Round(time.Millisecond), float64(written)/fill.Seconds()/1e6),
		fmt.Sprintf("pass: %d segments relocated, %d records / %.1f MiB copied in %v → %.1f MB/s; %d segments deleted",
			res.Relocated, res.Records, float64(res.Copied)/(1<<20), res.Took.Round(time.Millisecond), float64(res.Copied)/res.Took.Seconds()/1e6, res.Deleted),
		fmt.Sprintf("write amplification: %.2f (bytes written by producers and GC / by producers); %.2f bytes copied per byte freed",
			float64(written+res.Copied)/float64(written), float64(res.Copied)/float64(max(freed-res.Copied, 1))),
		fmt.Sprintf("foreground appends (%d senders, %d B, sync) without GC: p50 %v p99 %v (%d appends in 5 s)",
			o.Senders, o.Size, q(quiet, 0.5), q(quiet, 0.99), len(quiet)),
		fmt.Sprintf("foreground appends during the pass:          p50 %v p99 %v (%d appends in %v)",
			q(busy, 0.5), q(busy, 0.99), len(busy), res.Took.Round(time.Millisecond)))
	return r, nil
}
