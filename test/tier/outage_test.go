// Package tier_test runs tiered storage against a real S3 server process
// (versitygw) that the tests stop, kill and restart.
package tier_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// tierHealth reads the tier part of /healthz: its status and the upload lag.
func tierHealth(t *testing.T, n *apptest.TestNode) (status string, pending int) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Tier struct {
			Status  string `json:"status"`
			Pending int    `json:"pending_segments"`
		} `json:"tier"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h.Tier.Status, h.Tier.Pending
}

func value(p, i int) []byte {
	return append(fmt.Appendf(nil, "p%d-%07d|", p, i), bytes.Repeat([]byte{byte(i), byte(p)}, 500+i%300)...)
}

// producer writes to every partition of topic until stopped, counting
// what was acknowledged per partition (an idempotent producer: each
// partition's acknowledged records are exactly offsets 0..acked-1).
type producer struct {
	mu    sync.Mutex
	acked []int
	errs  int
	stop  chan struct{}
	done  chan struct{}
}

func startProducing(t *testing.T, addr, topic string, partitions int) *producer {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(64<<10), kgo.RecordRetries(1000))
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{acked: make([]int, partitions), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cl.Close()
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				_ = cl.Flush(ctx)
				return
			default:
			}
			part := i % partitions
			r := &kgo.Record{Partition: int32(part), Value: value(part, i/partitions)}
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				p.mu.Lock()
				defer p.mu.Unlock()
				if err != nil {
					p.errs++
					return
				}
				p.acked[r.Partition]++
			})
			if i%100 == 99 {
				time.Sleep(20 * time.Millisecond) // about 3 MB/s at most
			}
		}
	}()
	return p
}

func (p *producer) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, a := range p.acked {
		n += a
	}
	return n
}

// TestTierStoreOutage: the object store paused (requests hang) and then
// killed while producers write: every produce is acknowledged, /healthz
// says tiering is stalled, uploads catch up once the store is back; a cold
// read while the store is down fails without wrong data, and afterwards
// every acknowledged record reads back byte-exact from the bucket.
func TestTierStoreOutage(t *testing.T) {
	gw := apptest.StartVersityGW(t, "tier")
	c := apptest.TestConfig(t.TempDir())
	gw.Configure(&c, "tier", 2*time.Second)
	c.Storage.Tier.UploadInterval = 300 * time.Millisecond
	n := apptest.StartTestNode(t, c)
	const topic, partitions = "outage", 3
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	p := startProducing(t, n.KafkaAddr(), topic, partitions)
	grows := func(what string) {
		t.Helper()
		from := p.total()
		apptest.Eventually(t, time.Minute, what, func() bool { return p.total() > from+3000 })
	}
	tiered := func() int { s, _ := apptest.TierSegments(t, n); return s }
	apptest.Eventually(t, time.Minute, "segments tiered", func() bool { return tiered() >= 2 })

	for _, outage := range []string{"paused", "killed"} {
		if outage == "paused" {
			gw.Pause()
		} else {
			gw.Kill()
		}
		grows("produce acknowledged with the store " + outage)
		apptest.Eventually(t, time.Minute, "tiering reported stalled", func() bool { s, _ := tierHealth(t, n); return s == "stalled" })
		grows("produce acknowledged with tiering stalled")
		if outage == "paused" {
			gw.Resume()
		} else {
			gw.Start()
		}
		// Caught up: uploading again, behind by no more than what the
		// producer seals while one upload pass runs.
		apptest.Eventually(t, time.Minute, "uploads caught up", func() bool {
			s, pending := tierHealth(t, n)
			return s == "ok" && pending <= 3
		})
	}
	close(p.stop)
	<-p.done
	segments, local := apptest.TierNow(t, n)
	if local != 0 || segments < 4 {
		t.Fatalf("%d segments tiered, %d still local", segments, local)
	}

	read := func(group string, within time.Duration) (int, bool) {
		cons, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		next := make([]int, partitions)
		total, want := 0, p.total()
		deadline := time.Now().Add(within)
		for total < want && time.Now().Before(deadline) {
			pctx, pcancel := context.WithDeadline(ctx, deadline)
			fs := cons.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) {
				part := int(r.Partition)
				if int(r.Offset) != next[part] || !bytes.Equal(r.Value, value(part, next[part])) {
					t.Fatalf("partition %d offset %d: want offset %d's value", part, r.Offset, next[part])
				}
				next[part]++
				total++
			})
		}
		return total, total == want
	}
	gw.Kill()
	if got, _ := read("while-down", 3*time.Second); got != 0 {
		t.Fatalf("read %d records with the store down and every segment in it", got)
	}
	gw.Start()
	if got, ok := read("after", 2*time.Minute); !ok {
		t.Fatalf("read %d of %d acknowledged records back from the bucket", got, p.total())
	}
	t.Logf("%d records acknowledged (%d produce errors), %d segments tiered", p.total(), p.errs, segments)
}
