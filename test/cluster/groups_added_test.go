//go:build !race

package cluster_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterGroupsAdded: three members holding three replication groups
// serve Kafka (idempotent producers, transactions, a KIP-848 group),
// rocketmq-client-go and RocketMQ 5 clients; three groups are added while
// they run. Every group gets a leader, the leaders spread over the members,
// no queue moves (each partition keeps its group and leader), new
// partitions of a grown topic land on the new groups, a topic made now
// spreads over all six and RocketMQ clients see six brokers for it. A
// member's SIGKILL and restart keep the six groups. No acknowledged message
// is lost or duplicated, every transaction is whole, and the consumer
// group reads everything.
func TestClusterGroupsAdded(t *testing.T) {
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=0") // a group per member
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })

	adm := groupsAdmin(ctx, t, c, "grow-remoting")
	rl := startRemotingLoad(t, c, "grow-remoting")
	gl := startGRPCLoad(t, c, "grow-grpc", 1)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	kadmin := kadm.NewClient(kcl)
	for _, topic := range []string{"grow-kafka", "grow-txn"} {
		if resp, err := kadmin.CreateTopic(ctx, 6, 3, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	consumed := startGroupConsumer(t, c, "grow-kafka", "grow-audit")
	kl := startLoad(t, c, "grow-kafka", 2)
	var kl12 *load
	tl := startTxnLoad(t, c, "grow-txn")
	waitAcks := func(what string, n int) {
		t.Helper()
		start := time.Now()
		rn, gn, kn := rl.ackCount()+n, gl.ackCount()+n/5, kl.count()+n
		k12 := 0
		if kl12 != nil {
			k12 = kl12.count() + n
		}
		apptest.Eventually(t, 60*time.Second, what, func() bool {
			return rl.ackCount() >= rn && gl.ackCount() >= gn && kl.count() >= kn && (kl12 == nil || kl12.count() >= k12)
		})
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	}
	waitAcks("sends acknowledged", 150)
	before := queueGroups(ctx, t, c, "grow-kafka")

	// Three groups more, while everything runs.
	var added struct {
		Added []int `json:"added"`
	}
	if code := c.adminCall(ctx, t, http.MethodPost, "/api/v1/cluster/groups", map[string]any{"count": 3}, &added); code != http.StatusCreated ||
		!slices.Equal(added.Added, []int{3, 4, 5}) {
		t.Fatalf("add groups: %d %+v", code, added)
	}
	start := time.Now()
	apptest.Eventually(t, 60*time.Second, "six groups, each led by its preferred member", func() bool { return c.spreadOver(ctx, 6) })
	t.Logf("six groups led, by their preferred members, %v after they were added", time.Since(start).Round(time.Millisecond))
	waitAcks("sends acknowledged after groups were added", 150)
	if after := queueGroups(ctx, t, c, "grow-kafka"); !slices.Equal(after, before) {
		t.Fatalf("queues moved: groups %v before, %v after", before, after)
	}
	checkLeadersSpread(ctx, t, kadmin, "grow-kafka")

	// New partitions land on the new groups; a new topic spreads over all.
	for _, topic := range []string{"grow-kafka", "grow-txn"} {
		if resp, err := kadmin.UpdatePartitions(ctx, 12, topic); err != nil || resp[topic].Err != nil {
			t.Fatalf("grow %s: %v %+v", topic, err, resp)
		}
	}
	if got, want := queueGroups(ctx, t, c, "grow-kafka"), []int{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("grown topic's groups %v, want %v", got, want)
	}
	// A producer started now writes to all twelve (one running since
	// before writes to the six it knows).
	kl12 = startLoadOver(t, c, "grow-kafka", 1, 12, "x")
	if resp, err := kadmin.CreateTopic(ctx, 6, 3, nil, "grow-new"); err != nil || resp.Err != nil {
		t.Fatalf("create a topic over six groups: %v %v", err, resp.Err)
	}
	if got := queueGroups(ctx, t, c, "grow-new"); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("new topic's groups %v", got)
	}
	apptest.Eventually(t, 30*time.Second, "a produce to every partition of the new topic", func() bool {
		for p := range int32(6) {
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			err := kcl.ProduceSync(pctx, &kgo.Record{Topic: "grow-new", Partition: p, Value: []byte("x")}).FirstErr()
			pcancel()
			if err != nil {
				return false
			}
		}
		return true
	})
	groupsAdmin(ctx, t, c, "grow-remoting-new")
	apptest.Eventually(t, 30*time.Second, "rocketmq-client-go sees six brokers", func() bool {
		mqs, err := adm.FetchPublishMessageQueues(ctx, "grow-remoting-new")
		names := map[string]bool{}
		for _, q := range mqs {
			names[q.BrokerName] = true
		}
		return err == nil && len(names) == 6
	})
	waitAcks("sends acknowledged over twelve partitions", 300)

	// A member dies and comes back: the six groups stay.
	victim := c.member(2)
	c.kill(victim)
	c.start(victim)
	c.wait(victim)
	restarted := time.Now()
	apptest.Eventually(t, 60*time.Second, "the restarted member leads its groups again", func() bool { return c.spreadOver(ctx, 6) })
	t.Logf("the restarted member led its groups again %v after its start", time.Since(restarted).Round(time.Millisecond))
	waitAcks("sends acknowledged after the restart", 150)

	rl.stop()
	gl.stop()
	kl.stop()
	kl12.stop()
	tl.stop()
	rl.verify(t)
	gl.verify(t)
	acks := append(slices.Clone(kl.acks), kl12.acks...)
	t.Logf("Kafka: %d records acknowledged (%d failed, not acknowledged), %d of them to partitions 6-11", len(acks), kl.errs+kl12.errs,
		len(slices.DeleteFunc(slices.Clone(kl12.acks), func(a ack) bool { return a.partition < 6 })))
	verify(t, c, "grow-kafka", acks)
	consumed.readAll(t, acks, 60*time.Second)
	tl.verify(t, c)
	checkAdminOverGroups(ctx, t, c, "grow-kafka", "grow-audit", len(acks), 12)
}

// queueGroups is the replication group of each of topic's queues, as the
// admin API shows them.
func queueGroups(ctx context.Context, t *testing.T, c *cluster, topic string) []int {
	t.Helper()
	var d apiv1.TopicDetail
	if code := c.adminCall(ctx, t, http.MethodGet, "/api/v1/topics/"+topic, nil, &d); code != http.StatusOK {
		t.Fatalf("GET topic %s: %d", topic, code)
	}
	out := make([]int, len(d.QueueList))
	for i, q := range d.QueueList {
		if int(q.Queue) != i {
			t.Fatalf("topic %s lists queue %d at %d", topic, q.Queue, i)
		}
		out[i] = q.Group
	}
	return out
}

// spreadOver reports whether the cluster has n groups, group g led by its
// preferred member (g mod 3 + 1 of three), as a live member sees it.
func (c *cluster) spreadOver(ctx context.Context, n int) bool {
	st, ok := c.status(ctx)
	if !ok || len(st.Groups) != n {
		return false
	}
	for _, g := range st.Groups {
		if int(g.Leader) != int(g.ID)%len(c.members)+1 {
			return false
		}
	}
	return true
}
