//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterShareGroup: three franz-go share consumers of one group read
// a topic whose six partitions spread over three replication groups while
// a producer writes to it; the leader of group 1 is SIGKILLed mid-run and
// restarted. Every acknowledged record is delivered, and no record whose
// acceptance the broker confirmed is delivered again (the records the dead
// leader had handed out come back once their locks end, at the next
// leader, which restored the group's acquisitions from the replicated log).
func TestClusterShareGroup(t *testing.T) {
	c := newCluster(t, envGroups+"=0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic, group = "sh", "sh-g"
	kcl := c.spreadTopic(ctx, t, topic)
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for _, kv := range [][2]string{{"share.auto.offset.reset", "earliest"}, {"share.record.lock.duration.ms", "15000"}} {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = kv[0], kmsg.StringPtr(kv[1])
		r.Configs = append(r.Configs, cfg)
	}
	req.Resources = append(req.Resources, r)
	if resp, err := req.RequestWith(ctx, kcl); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("group configs: %v %+v", err, resp)
	}

	var mu sync.Mutex
	delivered := map[string]int{}
	confirmed := map[string]bool{} // accepted, and the broker said so
	redelivered := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		var ackErrs int
		var ackMu sync.Mutex
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
			kgo.ShareMaxRecords(100), kgo.FetchMaxWait(time.Second), clientLog(fmt.Sprint("share-", i)),
			kgo.ShareAckCallback(func(_ *kgo.Client, res kgo.ShareAckResults) {
				ackMu.Lock()
				for _, r := range res {
					if r.Err != nil {
						ackErrs++
					}
				}
				ackMu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				fs := cl.PollFetches(pctx)
				pcancel()
				var vals []string
				fs.EachRecord(func(rec *kgo.Record) {
					v := string(rec.Value)
					vals = append(vals, v)
					rec.Ack(kgo.AckAccept)
				})
				if len(vals) == 0 {
					continue
				}
				mu.Lock()
				for _, v := range vals {
					delivered[v]++
					if confirmed[v] {
						redelivered[v]++
					}
				}
				mu.Unlock()
				ackMu.Lock()
				before := ackErrs
				ackMu.Unlock()
				fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
				err := cl.FlushAcks(fctx)
				fcancel()
				ackMu.Lock()
				ok := err == nil && ackErrs == before
				ackMu.Unlock()
				if ok {
					mu.Lock()
					for _, v := range vals {
						confirmed[v] = true
					}
					mu.Unlock()
				}
			}
		}()
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), clientLog("share-producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	kl := startKafkaKeyedLoad(t, pcl)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(confirmed)
	}
	more := func(what string, n int) {
		t.Helper()
		want := count() + n
		apptest.Eventually(t, 90*time.Second, what, func() bool { return count() >= want })
	}
	more("records accepted", 2000)
	victim := c.member(2) // leads group 1
	c.kill(victim)
	t.Logf("member %d killed after %d records accepted", victim.id, count())
	more("records accepted after the kill", 2000)
	c.start(victim)
	c.wait(victim)
	apptest.Eventually(t, 90*time.Second, "group 1 back at member 2", func() bool { return c.spread(ctx) })
	more("records accepted after the restart", 2000)
	kl.stop()
	acked := kl.acked()
	apptest.Eventually(t, 2*time.Minute, "every acknowledged record delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range acked {
			if delivered[v] == 0 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	again := 0
	for _, n := range delivered {
		if n > 1 {
			again++
		}
	}
	t.Logf("%d records acknowledged to the producer (%d failed), %d delivered, %d delivered more than once (their acceptance unconfirmed), %d acceptances confirmed",
		len(acked), kl.failed.Load(), len(delivered), again, len(confirmed))
	if len(redelivered) > 0 {
		n := 0
		for v, k := range redelivered {
			if n++; n <= 10 {
				t.Errorf("record %s delivered %d times after its acceptance was confirmed", v, k)
			}
		}
		t.Fatalf("%d accepted records delivered again", len(redelivered))
	}
}
