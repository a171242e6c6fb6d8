//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterTierUploadKill: group 0's leader is SIGKILLed while the
// uploads of its sealed segments hang in a SIGSTOPped store. When the
// store is back, the new leader uploads those segments under its own term:
// the manifest names no object the deposed leader wrote after the store
// stopped, one object per segment, and the sweep (every 2 s here, for
// objects a minute old) deletes what the deposed leader's requests left in
// the bucket; every acknowledged record reads back. Outside CI (about two
// minutes).
func TestClusterTierUploadKill(t *testing.T) {
	gw := apptest.StartVersityGW(t, "tier")
	c := newCluster(t, envTier+"="+gw.Endpoint, envTierQuickSweep+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const topic = "inflight"
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 3, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	pad := []byte(strings.Repeat("k", 1000))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(256<<10), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordDeliveryTimeout(0),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 200 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var mu sync.Mutex
	var acks []ack
	next := 0
	produce := func(mib int) {
		t.Helper()
		for range mib << 10 {
			v := fmt.Sprintf("u-%07d", next)
			cl.Produce(ctx, &kgo.Record{Partition: int32(next % 3), Key: pad, Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce %s: %v", v, err)
					return
				}
				mu.Lock()
				acks = append(acks, ack{partition: r.Partition, offset: r.Offset, value: v})
				mu.Unlock()
			})
			next++
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	produce(6)
	b := gw.Bucket("tier", "rosetta/")
	apptest.Eventually(t, 2*time.Minute, "segments tiered", func() bool { return len(bucketKeys(t, b)) >= 3 })

	// The store stops; what was committed before is the manifest now.
	gw.Pause()
	time.Sleep(2 * time.Second)
	before := c.tieredKeys(ctx)
	// More segments seal; their uploads start and hang.
	produce(4)
	time.Sleep(3 * time.Second)
	st, ok := c.status(ctx)
	if !ok || len(st.Groups) == 0 || st.Groups[0].Leader == 0 {
		t.Fatal("no member leads group 0")
	}
	deposed, term := c.member(int(st.Groups[0].Leader)), st.Groups[0].Term
	c.kill(deposed)
	t.Logf("member %d, group 0's leader in term %d, SIGKILLed with its uploads hanging (%d objects in the manifest)", deposed.id, term, len(before))
	gw.Resume()
	c.start(deposed)
	c.wait(deposed)

	// The new leader uploads every sealed segment.
	apptest.Eventually(t, 3*time.Minute, "the local logs cut to their tail again", func() bool {
		for _, m := range c.members {
			if logBytes(t, m) > 8<<20 {
				return false
			}
		}
		return true
	})
	manifest := c.tieredKeys(ctx)
	firsts := map[string]string{}
	for k := range manifest {
		first, keyTerm, _ := strings.Cut(strings.TrimPrefix(k, "g0/"), "-")
		if n, err := strconv.Atoi(keyTerm); err == nil && n == int(term) && !before[k] {
			t.Errorf("the manifest names %s, uploaded by the deposed leader after the store stopped", k)
		}
		if other, ok := firsts[first]; ok {
			t.Errorf("the manifest names two objects of the segment from index %s: %s and %s", first, other, k)
		}
		firsts[first] = k
	}
	var orphans []string
	for _, k := range bucketKeys(t, b) {
		if !manifest[k] {
			orphans = append(orphans, k)
		}
	}
	t.Logf("%d objects in the manifest (%d before the kill); in the bucket besides: %v", len(manifest), len(before), orphans)
	if len(orphans) > 0 {
		apptest.Eventually(t, 3*time.Minute, "the sweep deleting the objects the manifest does not name", func() bool {
			for _, k := range bucketKeys(t, b) {
				if !manifest[k] {
					return false
				}
			}
			return true
		})
		t.Logf("swept: %v", orphans)
	}
	mu.Lock()
	got := append([]ack(nil), acks...)
	mu.Unlock()
	verify(t, c, topic, got)
}
