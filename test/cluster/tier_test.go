//go:build !race

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// logBytes sums a member's commit-log segment files.
func logBytes(t *testing.T, m *member) int64 {
	t.Helper()
	var n int64
	_ = filepath.WalkDir(filepath.Join(m.dir, "storage", "log"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// bucketKeys lists group 0's objects.
func bucketKeys(t *testing.T, b tier.Bucket) []string {
	t.Helper()
	var keys []string
	if err := b.List(context.Background(), "g0/", func(o tier.ObjectInfo) bool { keys = append(keys, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// pullAll pulls every queue of topic from its first offset with a
// rocketmq-client-go pull consumer, returning how many distinct messages
// check accepted (it fails the test on one it refuses).
func pullAll(t *testing.T, ns primitive.NsResolver, topic, group string, check func([]byte) (string, bool)) int {
	t.Helper()
	pc, err := rocketmq.NewPullConsumer(consumer.WithGroupName(group), consumer.WithNsResolver(ns), consumer.WithInstance(group))
	if err != nil {
		t.Fatal(err)
	}
	// The client looks up routes of the topics it was given: the topic
	// first, then its queues.
	var mqs []*primitive.MessageQueue
	err = pc.Assign(topic, nil)
	if err == nil {
		err = pc.Start()
	}
	if err == nil {
		mqs, err = pc.GetTopicRouteInfo(topic)
	}
	if err == nil {
		err = pc.Assign(topic, mqs)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Shutdown() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	for _, mq := range mqs {
		for off := int64(0); ; {
			res, err := pc.PullFrom(ctx, mq, off, 32)
			if err != nil {
				t.Fatalf("pull %s queue %d at %d: %v", group, mq.QueueId, off, err)
			}
			if res.Status != primitive.PullFound {
				break
			}
			for _, m := range res.GetMessageExts() {
				id, ok := check(m.Body)
				if !ok {
					t.Fatalf("%s: queue %d offset %d holds a message never sent: %.20q", group, mq.QueueId, m.QueueOffset, m.Body)
				}
				seen[id] = true
			}
			if off = res.NextBeginOffset; off >= res.MaxOffset {
				break // a pull at the end would wait for new messages
			}
		}
	}
	return len(seen)
}

// receiveAll receives topic with a new RocketMQ 5 SimpleConsumer group
// (which starts at the first offsets) over every member's gRPC listener
// until want distinct messages came or a minute passes without one.
func receiveAll(t *testing.T, c *cluster, topic, group string, want int, check func([]byte) (string, bool)) int {
	t.Helper()
	cfg := &rmq.Config{Endpoint: strings.Join(c.addrs(4), ";"), ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
	sc, err := rmq.NewSimpleConsumer(cfg, rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err == nil {
		err = sc.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.GracefulStop() }()
	ctx := context.Background()
	seen := map[string]bool{}
	for last := time.Now(); len(seen) < want && time.Since(last) < time.Minute; {
		mvs, err := sc.Receive(ctx, 32, 30*time.Second)
		var es *rmq.ErrRpcStatus
		if err != nil && !(errors.As(err, &es) && es.Code == 40401) {
			t.Logf("%s: receive: %v", group, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for _, mv := range mvs {
			id, ok := check(mv.GetBody())
			if !ok {
				t.Fatalf("%s: received a message never sent: %.20q", group, mv.GetBody())
			}
			if !seen[id] {
				seen[id], last = true, time.Now()
			}
			_ = sc.Ack(ctx, mv)
		}
	}
	return len(seen)
}

// TestClusterTiering: three members tier to a real S3 server (versitygw)
// while Kafka and RocketMQ producers write; each keeps a small local tail,
// the history is in the bucket (about one object per segment, none
// uploaded twice), and it reads back byte-exact through a franz-go fetch of
// every partition, a franz-go consumer group from the start, a RocketMQ
// push consumer and a pull consumer from the first offsets and a RocketMQ 5
// SimpleConsumer —
// before and after every member restarts and one is SIGKILLed.
// ROSETTA_CLUSTER_TIER_MB sets the Kafka data produced (32 MiB).
func TestClusterTiering(t *testing.T) {
	gw := apptest.StartVersityGW(t, "tier")
	totalMB := envInt("ROSETTA_CLUSTER_TIER_MB", 32)
	segMB, localMB := envInt(envTierSegmentMB, 1), envInt(envTierLocalMB, 4)
	c := newCluster(t, envTier+"="+gw.Endpoint, envTierSegmentMB+"="+strconv.Itoa(segMB), envTierLocalMB+"="+strconv.Itoa(localMB))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const topic, rtopic = "tiered", "tiered-rmq"
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 6, 3, nil, topic); err != nil {
		t.Fatal(err)
	}

	// Kafka: 1 KiB records (the value is what verify checks, the key pads).
	pad := []byte(strings.Repeat("k", 1000))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(256<<10), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acks []ack
	records := totalMB << 10
	start := time.Now()
	for i := range records {
		v := fmt.Sprintf("w0-%07d", i)
		cl.Produce(ctx, &kgo.Record{Partition: int32(i % 6), Key: pad, Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce %s: %v", v, err)
				return
			}
			mu.Lock()
			acks = append(acks, ack{partition: r.Partition, offset: r.Offset, value: v})
			mu.Unlock()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	took := time.Since(start)

	// RocketMQ: an eighth as much (at most 20,000), sync sends of 1 KiB
	// bodies.
	ns := primitive.NewPassthroughResolver(c.addrs(3))
	p, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName("tier-producer"), producer.WithInstanceName("tier-producer"),
		producer.WithRetry(2), producer.WithSendMsgTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	rbody := func(i int) string { return fmt.Sprintf("r%07d|%s", i, strings.Repeat("b", 1000)) }
	rmqCount := min(records/8, 20000)
	for i := range rmqCount {
		if res, err := p.SendSync(ctx, primitive.NewMessage(rtopic, []byte(rbody(i)))); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
	}
	_ = p.Shutdown()
	produced := int64(records+rmqCount) * 1100
	t.Logf("produced %d Kafka records (%d MiB) in %v and %d RocketMQ messages", records, totalMB, took.Round(time.Millisecond), rmqCount)

	// Tiered: each member's local log down to about its local retention
	// (plus the active segment and a sealed one awaiting upload); the
	// bucket holds about one object per segment of history.
	b := gw.Bucket("tier", "rosetta/")
	local := int64(localMB+3*segMB) << 20
	apptest.Eventually(t, 2*time.Minute, "local logs cut to their tail", func() bool {
		for _, m := range c.members {
			if logBytes(t, m) > local {
				return false
			}
		}
		return true
	})
	keys := bucketKeys(t, b)
	for _, m := range c.members {
		t.Logf("member %d: %d KiB of commit log locally", m.id, logBytes(t, m)>>10)
	}
	t.Logf("%d objects in the bucket for about %d MiB produced (%d MiB segments)", len(keys), produced>>20, segMB)
	if want := produced / (int64(segMB) << 20); int64(len(keys)) < want/2 || int64(len(keys)) > 2*want+4 {
		t.Fatalf("%d objects for about %d segments of history", len(keys), want)
	}

	readBack := func(round string) {
		t.Helper()
		verify(t, c, topic, acks) // one consumer fetching every partition
		startGroupConsumer(t, c, topic, "tier-group-"+round).readAll(t, acks, 5*time.Minute)
		got := map[string]bool{}
		var gmu sync.Mutex
		pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(ns), consumer.WithGroupName("tier-consumer-"+round),
			consumer.WithInstance("tier-consumer-"+round), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
		if err != nil {
			t.Fatal(err)
		}
		err = pc.Subscribe(rtopic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			gmu.Lock()
			defer gmu.Unlock()
			for _, m := range msgs {
				var i int
				if _, err := fmt.Sscanf(string(m.Body), "r%07d|", &i); err == nil && string(m.Body) == rbody(i) {
					got[string(m.Body[:8])] = true
				} else {
					t.Errorf("%s: a message that was never sent: %.20q", round, m.Body)
				}
			}
			return consumer.ConsumeSuccess, nil
		})
		if err == nil {
			err = pc.Start()
		}
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = pc.Shutdown() }()
		apptest.Eventually(t, 3*time.Minute, round+": every RocketMQ message consumed from the first offset", func() bool {
			gmu.Lock()
			defer gmu.Unlock()
			return len(got) == rmqCount
		})
		check := func(body []byte) (string, bool) {
			var i int
			_, err := fmt.Sscanf(string(body), "r%07d|", &i)
			return string(body[:min(8, len(body))]), err == nil && string(body) == rbody(i)
		}
		if n := pullAll(t, ns, rtopic, "tier-pull-"+round, check); n != rmqCount {
			t.Fatalf("%s: pulled %d of %d RocketMQ messages from the first offsets", round, n, rmqCount)
		}
		if n := receiveAll(t, c, rtopic, "tier-simple-"+round, rmqCount, check); n != rmqCount {
			t.Fatalf("%s: a RocketMQ 5 SimpleConsumer received %d of %d messages", round, n, rmqCount)
		}
	}
	readBack("first")

	// Every member restarts (SIGTERM), then one is SIGKILLed and comes back.
	for _, m := range c.members {
		c.stop(m)
		c.start(m)
		c.wait(m)
	}
	c.kill(c.members[1])
	c.start(c.members[1])
	c.wait(c.members[1])
	readBack("after-restarts")
	after := bucketKeys(t, b)
	firsts := map[string]string{}
	for _, k := range after {
		first, _, _ := strings.Cut(strings.TrimPrefix(k, "g0/"), "-")
		if other, ok := firsts[first]; ok {
			t.Errorf("segment from index %s uploaded twice: %s and %s", first, other, k)
		}
		firsts[first] = k
	}
	t.Logf("%d objects after the restarts (%d before)", len(after), len(keys))

	// A member's disk is replaced: it starts with an empty directory and
	// installs its group's image — state, manifest and local tail, not the
	// history the bucket holds.
	wiped := c.members[2]
	c.kill(wiped)
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	var target uint64 // the leader's commit index now: what the wiped member must reach
	apptest.Eventually(t, time.Minute, "the group's commit index", func() bool {
		for _, m := range c.members[:2] {
			if st, ok := c.statusFrom(ctx, m); ok {
				for _, g := range st.Groups {
					if g.Role == "leader" {
						target = uint64(g.CommitIndex)
					}
				}
			}
		}
		return target > 0
	})
	restarted := time.Now()
	c.start(wiped)
	apptest.Eventually(t, 3*time.Minute, "the wiped member a caught-up voter", func() bool {
		st, ok := c.statusFrom(ctx, wiped)
		if !ok {
			return false
		}
		for _, g := range st.Groups {
			if uint64(g.CommitIndex) >= target && uint64(g.LastIndex) >= target && slices.Contains(g.Replicas, model.NodeID(wiped.id)) {
				return true
			}
		}
		return false
	})
	caughtUp := time.Since(restarted)
	var fetched int64 // bytes on disk (preallocated files count what they hold)
	_ = filepath.WalkDir(wiped.dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					fetched += st.Blocks * 512
				}
			}
		}
		return nil
	})
	t.Logf("a member with a wiped disk was a caught-up voter %v after its start, holding %d MiB (%d MiB of history produced)",
		caughtUp.Round(time.Millisecond), fetched>>20, produced>>20)
	readBack("after-wipe")
}
