package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// consumed collects keys seen by a group's members.
type consumed struct {
	mu   sync.Mutex
	seen map[int]int
}

func (c *consumed) add(r *kgo.Record) {
	i, _ := strconv.Atoi(string(r.Key))
	c.mu.Lock()
	c.seen[i]++
	c.mu.Unlock()
}

func (c *consumed) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// runMember consumes in the group until ctx ends.
func runMember(ctx context.Context, t *testing.T, addr, topic, group string, bal kgo.GroupBalancer, out *consumed) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.Balancers(bal), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.AutoCommitInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(out.add)
		}
	}()
	return cl
}

// TestFranzGroupRebalancing runs a group of up to three consumers, eager and
// cooperative-sticky, while members join and leave and a producer keeps
// writing; every record must be consumed.
func TestFranzGroupRebalancing(t *testing.T) {
	for name, bal := range map[string]kgo.GroupBalancer{"eager-range": kgo.RangeBalancer(), "cooperative-sticky": kgo.CooperativeStickyBalancer()} {
		t.Run(name, func(t *testing.T) {
			n := startNode(t)
			ctx := ctxTimeout(t, 3*time.Minute)
			topic, group := "grp-"+name, "group-"+name
			adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
			if _, err := adm.CreateTopic(ctx, 16, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2*time.Millisecond))
			const total = 30000
			var produced atomic.Int64
			prodDone := make(chan error, 1)
			go func() {
				// 60 chunks of 500 records, 100 ms apart: the stream spans
				// every membership change below.
				for chunk := 0; chunk < total/500; chunk++ {
					var recs []*kgo.Record
					for i := chunk * 500; i < (chunk+1)*500; i++ {
						recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(fmt.Sprint("v", i))})
					}
					if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
						prodDone <- err
						return
					}
					produced.Add(500)
					time.Sleep(100 * time.Millisecond)
				}
				prodDone <- nil
			}()
			out := &consumed{seen: map[int]int{}}
			mctx, stop := context.WithCancel(ctx)
			defer stop()
			// Each membership change once the group made progress since
			// the last one.
			progressed := func(records int) {
				t.Helper()
				eventually(t, 60*time.Second, fmt.Sprint(records, " records consumed"), func() bool { return out.count() >= records })
			}
			m1 := runMember(mctx, t, n.KafkaAddr(), topic, group, bal, out)
			progressed(1500)
			m2 := runMember(mctx, t, n.KafkaAddr(), topic, group, bal, out)
			progressed(3000)
			m3 := runMember(mctx, t, n.KafkaAddr(), topic, group, bal, out)
			progressed(4500)
			m2.Close() // leaves the group
			progressed(6000)
			m4 := runMember(mctx, t, n.KafkaAddr(), topic, group, bal, out)
			if err := <-prodDone; err != nil {
				t.Fatalf("produce: %v", err)
			}
			eventually(t, 90*time.Second, "all records consumed", func() bool { return out.count() == total })
			stop()
			m1.Close()
			m3.Close()
			m4.Close()
			d, err := adm.DescribeGroups(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			_ = d
		})
	}
}

// TestFranzCommittedOffsetsSurviveRestart commits offsets, restarts the
// node on the same data, and resumes the group where it left off.
func TestFranzCommittedOffsetsSurviveRestart(t *testing.T) {
	cfg := apptest.TestConfig(t.TempDir())
	n := apptest.StartTestNode(t, cfg)
	ctx := ctxTimeout(t, time.Minute)
	p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("restart"), kgo.AllowAutoTopicCreation())
	for i := 0; i < 1000; i++ {
		if err := p.ProduceSync(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("restart"), kgo.ConsumerGroup("g-restart"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	got := 0
	for got < 600 {
		fs := c.PollRecords(ctx, 600-got)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	if err := c.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	p.Close()
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	before, err := adm.FetchOffsets(ctx, "g-restart")
	if err != nil {
		t.Fatal(err)
	}
	n.Stop(t)

	cfg.Listen.Kafka = "127.0.0.1:0"
	n2 := apptest.StartTestNode(t, cfg)
	adm2 := kadm.NewClient(newClient(t, n2.KafkaAddr()))
	after, err := adm2.FetchOffsets(ctx, "g-restart")
	if err != nil {
		t.Fatal(err)
	}
	var sumBefore, sumAfter int64
	before.Each(func(o kadm.OffsetResponse) { sumBefore += o.At })
	after.Each(func(o kadm.OffsetResponse) { sumAfter += o.At })
	if sumBefore != 600 || sumAfter != sumBefore {
		t.Fatalf("committed offsets before %d after %d", sumBefore, sumAfter)
	}
	c2 := newClient(t, n2.KafkaAddr(), kgo.ConsumeTopics("restart"), kgo.ConsumerGroup("g-restart"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	rest := 0
	for rest < 400 {
		fs := c2.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		rest += fs.NumRecords()
	}
	if rest != 400 {
		t.Fatalf("resumed with %d records, want 400", rest)
	}
}
