// Package bench is Rosetta's load generator: workloads that drive the
// storage engine directly (and, as front-ends land, each protocol) and report
// throughput, latency percentiles, CPU seconds per million messages and RSS.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Report is the outcome of one workload.
type Report struct {
	Name      string
	Records   int64
	Messages  int64
	Bytes     int64
	Elapsed   time.Duration
	CPU       time.Duration
	Latencies []time.Duration // per operation
	RSSBytes  int64           // resident, including mapped log pages
	AnonBytes int64           // resident anonymous memory (heap, stacks)
	PeakRSS   int64
	Extra     []string
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss returns the current and peak resident set size from /proc.
func rss() (cur, peak, anon int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = n << 10
		case "VmHWM:":
			peak = n << 10
		case "RssAnon:":
			anon = n << 10
		}
	}
	return cur, peak, anon
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

// Print writes the report in a stable, greppable form.
func (r *Report) Print(w io.Writer) {
	secs := r.Elapsed.Seconds()
	sort.Slice(r.Latencies, func(i, j int) bool { return r.Latencies[i] < r.Latencies[j] })
	fmt.Fprintf(w, "== %s\n", r.Name)
	fmt.Fprintf(w, "records        %d (%.0f records/s)\n", r.Records, float64(r.Records)/secs)
	fmt.Fprintf(w, "messages       %d (%.0f msgs/s)\n", r.Messages, float64(r.Messages)/secs)
	fmt.Fprintf(w, "throughput     %.1f MB/s (%.1f MiB/s)\n", float64(r.Bytes)/secs/1e6, float64(r.Bytes)/secs/(1<<20))
	fmt.Fprintf(w, "elapsed        %v\n", r.Elapsed.Round(time.Millisecond))
	if len(r.Latencies) > 0 {
		fmt.Fprintf(w, "latency        p50 %v  p99 %v  p999 %v  max %v  (%d ops)\n",
			percentile(r.Latencies, 0.50), percentile(r.Latencies, 0.99), percentile(r.Latencies, 0.999),
			r.Latencies[len(r.Latencies)-1], len(r.Latencies))
	}
	if r.Messages > 0 {
		fmt.Fprintf(w, "cpu            %.2f s total, %.3f CPU-s per million msgs\n", r.CPU.Seconds(), r.CPU.Seconds()/float64(r.Messages)*1e6)
	}
	fmt.Fprintf(w, "rss            %.1f MiB now (%.1f MiB anonymous, the rest mapped log pages), %.1f MiB peak\n",
		float64(r.RSSBytes)/(1<<20), float64(r.AnonBytes)/(1<<20), float64(r.PeakRSS)/(1<<20))
	for _, e := range r.Extra {
		fmt.Fprintln(w, e)
	}
}

// runSenders calls op for operations 1..n from the given number of
// goroutines and returns each operation's latency, stopping at the first
// error.
func runSenders(ctx context.Context, n int64, senders int, op func(i int64) error) ([]time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Value
	lats := make([][]time.Duration, senders)
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for i := next.Add(1); i <= n && ctx.Err() == nil; i = next.Add(1) {
				t0 := time.Now()
				if err := op(i); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				lats[s] = append(lats[s], time.Since(t0))
			}
		}(s)
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return all, nil
}

// opsReport is the report of a run of single-message operations of size
// bytes each, with their latencies, and the process's CPU since cpu0.
func opsReport(name string, lats []time.Duration, size int, el, cpu0 time.Duration) *Report {
	n := int64(len(lats))
	r := &Report{Name: name, Records: n, Messages: n, Bytes: n * int64(size), Elapsed: el, CPU: cpuTime() - cpu0, Latencies: lats}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	return r
}
