//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterQueueMoves: three members, three groups added while clients
// run — Kafka (idempotent producers at acks=all, a KIP-848 consumer group,
// transactional producers), rocketmq-client-go (sync sends, a push
// consumer, hash-keyed sends to an orderly push consumer) and RocketMQ 5
// (a producer, a SimpleConsumer) — then queues
// moved to the new groups without copying their history. Each move
// answers with the offset the queue goes on from; the producers carry on
// (a moved partition's leader epoch grows; RocketMQ clients keep the
// queue's broker name and id), the topic's queues are in the new groups,
// a reader from the start reads the moved partitions' history from their
// old groups, and no acknowledged message is lost, duplicated or
// reordered, the consumer group's committed offsets never go backwards,
// every transaction is whole. Moves that cannot be made are refused as
// such.
func TestClusterQueueMoves(t *testing.T) {
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=0") // a group per member
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })

	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	kadmin := kadm.NewClient(kcl)
	for _, topic := range []string{"move-kafka", "move-txn"} {
		if resp, err := kadmin.CreateTopic(ctx, 6, 3, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	consumed := startGroupConsumer(t, c, "move-kafka", "move-audit")
	loadStart := time.Now()
	kl := startLoad(t, c, "move-kafka", 2)
	tl := startTxnLoad(t, c, "move-txn")
	// RocketMQ topics of four queues per group (twelve: queue i in group
	// i mod 3); rocketmq-client-go sync sends and a push consumer, a
	// RocketMQ 5 producer and SimpleConsumer.
	groupsAdmin(ctx, t, c, "move-remoting")
	groupsAdmin(ctx, t, c, "move-grpc")
	groupsAdmin(ctx, t, c, "move-ordered")
	rl := startRemotingLoad(t, c, "move-remoting")
	gl := startGRPCLoad(t, c, "move-grpc", 1)
	ol := startOrderedLoad(t, c, "move-ordered")
	commits := watchCommits(t, c, "move-audit")
	waitAcks := func(what string, n int) {
		t.Helper()
		start, want, rn, gn := time.Now(), kl.count()+n, rl.ackCount()+n/10, gl.ackCount()+n/20
		apptest.Eventually(t, 60*time.Second, what, func() bool { return kl.count() >= want && rl.ackCount() >= rn && gl.ackCount() >= gn })
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	}
	waitAcks("records acknowledged", 300)

	var added struct {
		Added []int `json:"added"`
	}
	if code := c.adminCall(ctx, t, http.MethodPost, "/api/v1/cluster/groups", map[string]any{"count": 3}, &added); code != http.StatusCreated {
		t.Fatalf("add groups: %d %+v", code, added)
	}
	apptest.Eventually(t, 60*time.Second, "six groups, each led by its preferred member", func() bool { return c.spreadOver(ctx, 6) })
	waitAcks("records acknowledged after groups were added", 300)
	epochs := func(topic string) map[int32]int32 {
		// A new client each time: a client answers metadata requests from
		// what it fetched in the last seconds.
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		md, err := kadm.NewClient(cl).Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int32{}
		for _, p := range md.Topics[topic].Partitions {
			out[p.Partition] = p.LeaderEpoch
		}
		return out
	}
	before := epochs("move-kafka")

	// Partitions 0-2 (groups 0-2) move to groups 3-5 while the clients run.
	move := func(topic string, q, to int) (apiv1.QueueMove, int) {
		var got apiv1.QueueMove
		code := c.adminCall(ctx, t, http.MethodPost, fmt.Sprintf("/api/v1/topics/%s/queues/%d/move", topic, q), map[string]any{"to_group": to}, &got)
		return got, code
	}
	movedAt := map[int32]int64{}
	for q := range 3 {
		got, code := move("move-kafka", q, q+3)
		if code != http.StatusOK || got.FromGroup != q || got.ToGroup != q+3 || got.FromOffset <= 0 {
			t.Fatalf("move partition %d: %d %+v", q, code, got)
		}
		movedAt[int32(q)] = got.FromOffset
		t.Logf("partition %d moved from group %d to %d at offset %d in %d ms", q, got.FromGroup, got.ToGroup, got.FromOffset, got.Millis)
	}
	for _, m := range []struct {
		topic string
		q, to int
	}{{"move-txn", 0, 3}, {"move-remoting", 0, 3}, {"move-remoting", 5, 4}, {"move-grpc", 0, 5}, {"move-grpc", 9, 3},
		{"move-ordered", 0, 3}, {"move-ordered", 1, 4}, {"move-ordered", 2, 5}, {"move-ordered", 3, 3}, {"move-ordered", 4, 4}, {"move-ordered", 5, 5}} {
		got, code := move(m.topic, m.q, m.to)
		if code != http.StatusOK {
			t.Fatalf("move %s queue %d: %d %+v", m.topic, m.q, code, got)
		}
		t.Logf("%s queue %d moved from group %d to %d at offset %d in %d ms", m.topic, m.q, got.FromGroup, m.to, got.FromOffset, got.Millis)
	}
	if got, want := queueGroups(ctx, t, c, "move-kafka"), []int{3, 4, 5, 0, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("groups after the moves %v, want %v", got, want)
	}
	// Refused, nothing changed: to the group it is in, to one it was in,
	// to a group the cluster lacks; an unknown topic or queue.
	for _, bad := range []struct {
		topic  string
		q, to  int
		status int
	}{{"move-kafka", 0, 3, http.StatusBadRequest}, {"move-kafka", 0, 0, http.StatusBadRequest},
		{"move-kafka", 3, 9, http.StatusBadRequest}, {"move-none", 0, 3, http.StatusNotFound}, {"move-kafka", 6, 3, http.StatusNotFound}} {
		if _, code := move(bad.topic, bad.q, bad.to); code != bad.status {
			t.Errorf("move %s/%d to group %d answered %d, want %d", bad.topic, bad.q, bad.to, code, bad.status)
		}
	}
	if got, want := queueGroups(ctx, t, c, "move-kafka"), []int{3, 4, 5, 0, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("groups after refused moves %v, want %v", got, want)
	}
	waitAcks("records acknowledged after the moves", 600)
	// A time before the moves is found in the pieces the partitions left.
	byTime, err := kadm.NewClient(kcl).ListOffsetsAfterMilli(ctx, loadStart.UnixMilli(), "move-kafka")
	if err != nil || byTime.Error() != nil {
		t.Fatalf("offsets by time: %v %v", err, byTime.Error())
	}
	for p, from := range movedAt {
		if o, ok := byTime.Lookup("move-kafka", p); !ok || o.Offset < 0 || o.Offset >= from {
			t.Errorf("partition %d: offset for a time before its move %+v, its new piece starts at %d", p, o, from)
		}
	}
	if mib, _ := strconv.Atoi(os.Getenv("ROSETTA_MOVE_HISTORY_MIB")); mib > 0 {
		moveWithHistory(ctx, t, c, mib, move)
	}
	after := epochs("move-kafka")
	for p := range int32(3) {
		if after[p] <= before[p] {
			t.Errorf("partition %d: leader epoch %d before the move, %d after", p, before[p], after[p])
		}
	}
	kl.stop()
	tl.stop()
	rl.stop()
	gl.stop()
	ol.stop()
	rl.verify(t)
	gl.verify(t)
	ol.verify(t)
	t.Logf("Kafka: %d records acknowledged (%d failed, not acknowledged)", len(kl.acks), kl.errs)
	verify(t, c, "move-kafka", kl.acks)
	consumed.readAll(t, kl.acks, 60*time.Second)
	commits.stop(t, true)
	tl.verify(t, c)
}

// moveWithHistory fills a partition with mib MiB and moves it, reporting
// how long the move took (its duration does not depend on the history).
func moveWithHistory(ctx context.Context, t *testing.T, c *cluster, mib int, move func(string, int, int) (apiv1.QueueMove, int)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic("move-history"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, nil, "move-history"); err != nil || resp.Err != nil {
		t.Fatalf("create move-history: %v %v", err, resp.Err)
	}
	value := make([]byte, 64<<10)
	start := time.Now()
	for i := 0; i < mib*16; i++ {
		cl.Produce(ctx, &kgo.Record{Partition: 0, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("history record: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d MiB into move-history/0 in %v", mib, time.Since(start).Round(time.Millisecond))
	to := (queueGroups(ctx, t, c, "move-history")[0] + 1) % 6
	got, code := move("move-history", 0, to)
	if code != http.StatusOK {
		t.Fatalf("move move-history/0: %d %+v", code, got)
	}
	t.Logf("moved move-history/0 (%d MiB, %d records) from group %d to %d in %d ms", mib, got.FromOffset, got.FromGroup, got.ToGroup, got.Millis)
	// Its history is read where it stayed.
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"move-history": {0: kgo.NewOffset().AtStart()}}), kgo.FetchMaxBytes(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	start = time.Now()
	var n, bytes int64
	for n < got.FromOffset && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if r.Offset != n {
				t.Fatalf("history record at %d, want %d", r.Offset, n)
			}
			n, bytes = n+1, bytes+int64(len(r.Value))
		})
	}
	t.Logf("read the moved partition's history (%d records, %d MiB) from the start in %v", n, bytes>>20, time.Since(start).Round(time.Millisecond))
}

// TestClusterQueueBalancer: with cluster.balance_queues set, a topic's
// queues spread over three groups spread over six once three groups are
// added (one queue per group), moved one at a time while idempotent
// producers and a consumer group run; nothing acknowledged is lost or
// duplicated.
func TestClusterQueueBalancer(t *testing.T) {
	c := newCluster(t, envGroups+"=0", envBalanceQueues+"=300ms")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	if resp, err := kadm.NewClient(kcl).CreateTopic(ctx, 6, 3, nil, "balanced"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	consumed := startGroupConsumer(t, c, "balanced", "balanced-audit")
	kl := startLoad(t, c, "balanced", 2)
	apptest.Eventually(t, 30*time.Second, "records acknowledged", func() bool { return kl.count() >= 300 })
	if got := queueGroups(ctx, t, c, "balanced"); !slices.Equal(got, []int{0, 1, 2, 0, 1, 2}) {
		t.Fatalf("balanced before groups were added: %v", got)
	}
	if code := c.adminCall(ctx, t, http.MethodPost, "/api/v1/cluster/groups", map[string]any{"count": 3}, nil); code != http.StatusCreated {
		t.Fatalf("add groups: %d", code)
	}
	start := time.Now()
	apptest.Eventually(t, 90*time.Second, "one queue in each of six groups", func() bool {
		// Read while groups are still electing and handing leadership to
		// their preferred members: a group not served yet answers 503.
		var d apiv1.TopicDetail
		if code, err := c.adminTry(ctx, t, c.members[0], http.MethodGet, "/api/v1/topics/balanced", nil, &d); err != nil || code != http.StatusOK {
			return false
		}
		var got []int
		for _, q := range d.QueueList {
			got = append(got, q.Group)
		}
		slices.Sort(got)
		return slices.Equal(got, []int{0, 1, 2, 3, 4, 5})
	})
	t.Logf("queues balanced over six groups %v after they were added: %v", time.Since(start).Round(time.Millisecond), queueGroups(ctx, t, c, "balanced"))
	want := kl.count() + 300
	apptest.Eventually(t, 30*time.Second, "records acknowledged after balancing", func() bool { return kl.count() >= want })
	kl.stop()
	t.Logf("Kafka: %d records acknowledged (%d failed, not acknowledged)", len(kl.acks), kl.errs)
	verify(t, c, "balanced", kl.acks)
	consumed.readAll(t, kl.acks, 60*time.Second)
}
