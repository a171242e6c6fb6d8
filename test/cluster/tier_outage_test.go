//go:build !race

package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// probe produces one record a second, each tried once, and remembers how
// each answer came and how long it took: at the disk guard a produce must
// be refused at once with KAFKA_STORAGE_ERROR, never left hanging. A
// retriable answer (a leader moving) or a broken connection counts as
// moved: the next second's record tries again, after the client looked the
// leader up (metadata at most 250 ms old, so the client's own wait is not
// what is measured).
type probe struct {
	mu      sync.Mutex
	refused int           // KAFKA_STORAGE_ERROR answers
	acked   int           // acknowledged
	moved   int           // other retriable answers (a leader moving)
	other   []error       // any other failure
	slowest time.Duration // longest wait for an answer
	cancel  context.CancelFunc
	done    chan struct{}
}

func startProbe(t *testing.T, c *cluster, topic string) *probe {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite(),
		kgo.RecordRetries(0), kgo.RequestRetries(0), kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(20*time.Second),
		kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cl.Close()
		for ctx.Err() == nil {
			sent := time.Now()
			res := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("probe")})
			err := res.FirstErr()
			took := time.Since(sent)
			p.mu.Lock()
			p.slowest = max(p.slowest, took)
			switch {
			case err == nil:
				p.acked++
			case errors.Is(err, kerr.KafkaStorageError):
				p.refused++
			case kerr.IsRetriable(err), errors.Is(err, kgo.ErrRecordRetries), errors.Is(err, io.EOF),
				errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED):
				p.moved++
			case ctx.Err() == nil:
				p.other = append(p.other, fmt.Errorf("%w (after %v)", err, took.Round(time.Millisecond)))
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second - min(took, time.Second)):
			}
		}
	}()
	return p
}

func (p *probe) snapshot() (refused, acked int, other []error, slowest time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused, p.acked, append([]error(nil), p.other...), p.slowest
}

// TestClusterTierStoreOutage: three members tier to a real S3 server
// (versitygw) with a local disk budget (ROSETTA_CLUSTER_TIER_DISK_MB, 32)
// while an idempotent producer writes 1 KiB records; the store is
// SIGSTOPped, then SIGKILLed, each for ROSETTA_CLUSTER_TIER_OUTAGE seconds
// (10; 60 for the figures of the closing notes). Local disk stays within
// the budget, produce is refused with KAFKA_STORAGE_ERROR at once (never
// hangs) once the guard is reached, uploads catch up when the store is
// back, and every acknowledged record reads back byte-exact.
func TestClusterTierStoreOutage(t *testing.T) {
	outage := time.Duration(envInt("ROSETTA_CLUSTER_TIER_OUTAGE", 10)) * time.Second
	diskMB := envInt(envTierDiskMB, 32)
	gw := apptest.StartVersityGW(t, "tier")
	c := newCluster(t, envTier+"="+gw.Endpoint, fmt.Sprintf("%s=%d", envTierDiskMB, diskMB))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const topic, probeTopic = "outage", "outage-probe"
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for name, parts := range map[string]int32{topic: 3, probeTopic: 1} {
		if _, err := kadm.NewClient(adm).CreateTopic(ctx, parts, 3, nil, name); err != nil {
			t.Fatal(err)
		}
	}

	// The producer: about 2 MB/s of 1 KiB records, idempotent, retrying
	// for as long as it takes.
	pad := []byte(strings.Repeat("k", 1000))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordDeliveryTimeout(0),
		kgo.RetryBackoffFn(func(int) time.Duration { return 200 * time.Millisecond }), clientLog("producer"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acks []ack
	var prodErrs int
	pctx, stopProducing := context.WithCancel(ctx)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; pctx.Err() == nil; i++ {
			v := fmt.Sprintf("o-%07d", i)
			cl.Produce(pctx, &kgo.Record{Partition: int32(i % 3), Key: pad, Value: []byte(v)}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					prodErrs++
					return
				}
				acks = append(acks, ack{partition: r.Partition, offset: r.Offset, value: v})
			})
			if i%20 == 19 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	acked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acks)
	}
	pr := startProbe(t, c, probeTopic)
	b := gw.Bucket("tier", "rosetta/")
	apptest.Eventually(t, 2*time.Minute, "segments tiered", func() bool { return len(bucketKeys(t, b)) >= 3 })

	budget := int64(diskMB) << 20
	var peak int64
	watchDisk := func() {
		for _, m := range c.members {
			n := storageBytes(m.dir)
			peak = max(peak, n)
			if n > budget+(2<<20) {
				t.Errorf("member %d holds %d MiB of storage, over its %d MiB budget", m.id, n>>20, diskMB)
			}
		}
	}
	for _, kind := range []string{"SIGSTOP", "SIGKILL"} {
		refused0, _, _, _ := pr.snapshot()
		before := acked()
		if kind == "SIGSTOP" {
			gw.Pause()
		} else {
			gw.Kill()
		}
		began := time.Now()
		for time.Since(began) < outage {
			watchDisk()
			time.Sleep(250 * time.Millisecond)
		}
		refused, _, other, slowest := pr.snapshot()
		pr.mu.Lock()
		moved := pr.moved
		pr.mu.Unlock()
		t.Logf("store %s for %v: %d records acknowledged meanwhile, probe refused %d times (KAFKA_STORAGE_ERROR), %d retriable answers in all so far, slowest answer %v, peak storage %d MiB",
			kind, outage, acked()-before, refused-refused0, moved, slowest.Round(time.Millisecond), peak>>20)
		if refused == refused0 {
			t.Errorf("store %s: produce was never refused at the disk guard", kind)
		}
		if len(other) > 0 {
			t.Errorf("store %s: produce failed otherwise: %v", kind, other)
		}
		if kind == "SIGSTOP" {
			gw.Resume()
		} else {
			gw.Start()
		}
		back := time.Now()
		_, ackedBack, _, _ := pr.snapshot()
		producedBack := acked()
		apptest.Eventually(t, 3*time.Minute, "produce acknowledged again after the store's "+kind, func() bool {
			watchDisk()
			_, a, _, _ := pr.snapshot()
			return a > ackedBack && acked() > producedBack+1000
		})
		apptest.Eventually(t, 3*time.Minute, "uploads caught up after the store's "+kind, func() bool {
			for _, m := range c.members {
				// Steady state: indexes, the local retention, the active
				// segment and one awaiting upload (about 13 MiB).
				if storageBytes(m.dir) > budget-(12<<20) {
					return false
				}
			}
			return true
		})
		t.Logf("store %s: writes accepted and uploads caught up %v after it came back", kind, time.Since(back).Round(time.Millisecond))
	}
	stopProducing()
	<-produced
	fctx, fcancel := context.WithTimeout(ctx, time.Minute)
	_ = cl.Flush(fctx)
	fcancel()
	cl.Close()
	pr.cancel()
	<-pr.done
	_, _, _, slowest := pr.snapshot()
	if slowest > 5*time.Second {
		t.Errorf("a produce waited %v for its answer", slowest)
	}
	mu.Lock()
	got := append([]ack(nil), acks...)
	mu.Unlock()
	t.Logf("%d records acknowledged, %d failed (cancelled at the end); %d objects in the bucket; peak storage %d MiB of %d",
		len(got), prodErrs, len(bucketKeys(t, b)), peak>>20, diskMB)
	verify(t, c, topic, got)
	// The manifest names one object per segment; another object of the
	// same segment is a deposed leader's orphan, which the sweep removes
	// after its grace period.
	manifest := c.tieredKeys(ctx)
	firsts := map[string]string{}
	orphans := 0
	for _, k := range bucketKeys(t, b) {
		if !manifest[k] {
			orphans++
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(k, "g0/"), "-")
		if other, ok := firsts[first]; ok {
			t.Errorf("the manifest names two objects of the segment from index %s: %s and %s", first, other, k)
		}
		firsts[first] = k
	}
	if len(manifest) == 0 {
		t.Error("no member answered with the manifest")
	}
	t.Logf("%d objects in the manifest, %d orphans in the bucket", len(manifest), orphans)
}

// tieredKeys is group 0's manifest as its leader's admin API lists it.
func (c *cluster) tieredKeys(ctx context.Context) map[string]bool {
	keys := map[string]bool{}
	for _, m := range c.members {
		var rep apiv1.TierReport
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(m.host, strconv.Itoa(c.ports[5]))+"/api/v1/storage/tier", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		err = json.NewDecoder(resp.Body).Decode(&rep)
		resp.Body.Close()
		if err == nil && len(rep.Segments) > len(keys) {
			keys = map[string]bool{}
			for _, s := range rep.Segments {
				keys["g0/"+strings.TrimPrefix(s.Key, "g0/")] = true
			}
		}
	}
	return keys
}
