//go:build !race

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	rmqadmin "github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterGroups: three members holding three replication groups, each
// led by its preferred member (leaders spread). rocketmq-client-go sees
// three broker names and its sends reach all three; RocketMQ 5 clients'
// sends reach each group's leader; Kafka clients see each partition led by
// its group's leader and produce to all three (idempotent and
// transactional producers, a KIP-848 consumer group). When the member
// leading a group is killed, another member takes the group over and the
// clients carry on (a sync send retries another broker); the member
// restarts, catches up and gets its group back. No acknowledged message
// is lost or duplicated, and every transaction is whole.
func TestClusterGroups(t *testing.T) {
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=0") // the default: a group per member
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	spread := func() bool { return c.spread(ctx) }
	start := time.Now()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", spread)
	t.Logf("leaders spread %v after the start", time.Since(start).Round(time.Millisecond))

	// A topic made through one broker has its queues in every group.
	adm := groupsAdmin(ctx, t, c, "groups-remoting")
	rl := startRemotingLoad(t, c, "groups-remoting")
	gl := startGRPCLoad(t, c, "groups-grpc", 1)
	var waitAcks func(what string, n int)
	waitAcks = func(what string, n int) {
		t.Helper()
		start := time.Now()
		rn, gn := rl.ackCount()+n, gl.ackCount()+n/5
		apptest.Eventually(t, 60*time.Second, what, func() bool { return rl.ackCount() >= rn && gl.ackCount() >= gn })
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	kadmin := kadm.NewClient(kcl)
	three := "3"
	for _, topic := range []string{"groups-kafka", "groups-txn", "groups-isr"} {
		var cfg map[string]*string
		if topic == "groups-isr" {
			cfg = map[string]*string{"min.insync.replicas": &three}
		}
		if resp, err := kadmin.CreateTopic(ctx, 6, 3, cfg, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	checkISR(ctx, t, c, "groups-isr", nil, 30*time.Second)
	strict := startMinInSyncProbe(t, c, "groups-isr")
	checkLeadersSpread(ctx, t, kadmin, "groups-kafka")
	consumed := startGroupConsumer(t, c, "groups-kafka", "groups-audit")
	kl := startLoad(t, c, "groups-kafka", 2)
	tl := startTxnLoad(t, c, "groups-txn")
	waitAcks = func(what string, n int) {
		t.Helper()
		start := time.Now()
		rn, gn, kn := rl.ackCount()+n, gl.ackCount()+n/5, kl.count()+n
		apptest.Eventually(t, 60*time.Second, what, func() bool {
			return rl.ackCount() >= rn && gl.ackCount() >= gn && kl.count() >= kn
		})
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	}
	waitAcks("sends acknowledged", 150)

	mqs, err := adm.FetchPublishMessageQueues(ctx, "groups-remoting")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, q := range mqs {
		names[q.BrokerName]++
	}
	if len(names) != 3 || len(mqs) != 12 {
		t.Fatalf("rocketmq-client-go sees brokers %v, want three", names)
	}
	rl.mu.Lock()
	sentTo := fmt.Sprint(rl.brokers)
	reached := len(rl.brokers)
	rl.mu.Unlock()
	if reached != 3 {
		t.Fatalf("remoting sends reached brokers %s, want all three", sentTo)
	}
	gl.mu.Lock()
	grpcTo := fmt.Sprint(gl.brokers)
	reached = len(gl.brokers)
	gl.mu.Unlock()
	if reached != 3 {
		t.Fatalf("gRPC sends reached %s, want the three groups' leaders", grpcTo)
	}
	t.Logf("queues per broker %v; remoting sends by broker %s; gRPC sends by endpoint %s", names, sentTo, grpcTo)

	// The member leading group 1 dies: the others take the group over.
	victim := c.member(2)
	killed := time.Now()
	c.kill(victim)
	apptest.Eventually(t, 30*time.Second, "group 1 led by another member", func() bool {
		st, ok := c.status(ctx)
		return ok && len(st.Groups) == 3 && st.Groups[1].Leader != 0 && st.Groups[1].Leader != 2
	})
	t.Logf("group 1 led again %v after its leader's SIGKILL", time.Since(killed).Round(time.Millisecond))
	checkISR(ctx, t, c, "groups-isr", victim, 30*time.Second)
	t.Logf("no member names member 2 in sync %v after its SIGKILL", time.Since(killed).Round(time.Millisecond))
	strict.waitRefused(t, 30*time.Second)
	t.Logf("next acknowledged Kafka produce to a partition of group 1: %v after the kill",
		kl.waitAckAfterIn(t, killed, 30*time.Second, func(p int32) bool { return p%3 == 1 }).Round(time.Millisecond))
	waitAcks("sends acknowledged after the kill", 150)

	c.start(victim)
	c.wait(victim)
	restarted := time.Now()
	apptest.Eventually(t, 60*time.Second, "the restarted member leads its group again", spread)
	t.Logf("the restarted member led its group again %v after its start", time.Since(restarted).Round(time.Millisecond))
	waitAcks("sends acknowledged after the restart", 150)
	checkLeadersSpread(ctx, t, kadmin, "groups-kafka")
	checkISR(ctx, t, c, "groups-isr", nil, 30*time.Second)
	strict.waitAccepted(t, 30*time.Second)
	strict.stop(t)
	rl.stop()
	gl.stop()
	kl.stop()
	tl.stop()
	rl.verify(t)
	gl.verify(t)
	t.Logf("Kafka: %d records acknowledged (%d failed, not acknowledged)", len(kl.acks), kl.errs)
	verify(t, c, "groups-kafka", kl.acks)
	consumed.readAll(t, kl.acks, 60*time.Second)
	tl.verify(t, c)
	checkAdminOverGroups(ctx, t, c, "groups-kafka", "groups-audit", len(kl.acks), 6)
	checkReplicaCopies(ctx, t, kcl, "groups-kafka", 6)
}

// checkLeadersSpread: Kafka's metadata names partition p's leader member
// p mod 3 + 1 (its group's preferred leader).
func checkLeadersSpread(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		td, err := adm.ListTopics(ctx, topic)
		ok := err == nil && td[topic].Err == nil && len(td[topic].Partitions) >= 6
		got = fmt.Sprint(err)
		if err == nil {
			got = fmt.Sprint(td[topic].Err)
			for p, pd := range td[topic].Partitions {
				got += fmt.Sprintf(" %d:%d%v", p, pd.Leader, pd.Replicas)
				if int(pd.Leader) != int(p)%3+1 || len(pd.Replicas) != 3 {
					ok = false
				}
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Kafka partitions not led by their groups' leaders: %s", got)
		}
	}
	t.Logf("partition leaders:%s", got)
}

// spread reports whether group g is led by member g+1 (each group by its
// preferred member), as a live member sees it.
func (c *cluster) spread(ctx context.Context) bool {
	st, ok := c.status(ctx)
	if !ok || len(st.Groups) != 3 {
		return false
	}
	for _, g := range st.Groups {
		if int(g.Leader) != int(g.ID)+1 {
			return false
		}
	}
	return true
}

// groupsAdmin is a rocketmq-client-go admin over the members' name servers,
// closed with the test, after it made a topic of four queues per broker
// through group 0's broker.
func groupsAdmin(ctx context.Context, t *testing.T, c *cluster, topic string) rmqadmin.Admin {
	t.Helper()
	adm, err := rmqadmin.NewAdmin(rmqadmin.WithResolver(primitive.NewPassthroughResolver(c.addrs(3))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	if err := adm.CreateTopic(ctx, rmqadmin.WithTopicCreate(topic), rmqadmin.WithBrokerAddrCreate(c.addrs(3)[0]),
		rmqadmin.WithReadQueueNums(4), rmqadmin.WithWriteQueueNums(4)); err != nil {
		t.Fatal(err)
	}
	return adm
}

// status is the cluster as a live member's admin API shows it.
func (c *cluster) status(ctx context.Context) (admin.ClusterStatus, bool) {
	for _, m := range c.members {
		if st, ok := c.statusFrom(ctx, m); ok {
			return st, true
		}
	}
	return admin.ClusterStatus{}, false
}

// statusFrom is the cluster as one member's admin API shows it.
func (c *cluster) statusFrom(ctx context.Context, m *member) (admin.ClusterStatus, bool) {
	if m.cmd == nil {
		return admin.ClusterStatus{}, false
	}
	var st admin.ClusterStatus
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(m.host, strconv.Itoa(c.ports[5]))+"/api/v1/cluster", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, false
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	sort.Slice(st.Groups, func(i, j int) bool { return st.Groups[i].ID < st.Groups[j].ID })
	return st, err == nil
}

// logStatuses logs every running member's view of the replication groups
// (leader, term, log indexes and, on a leader, its replicas' progress), for
// a test about to fail.
func (c *cluster) logStatuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range c.members {
		st, ok := c.statusFrom(ctx, m)
		if !ok {
			t.Logf("member %d: no status", m.id)
			continue
		}
		for _, g := range st.Groups {
			t.Logf("member %d, group %d: %s, leader %d, term %d, log %d..%d, durable %d, committed %d, progress %+v",
				m.id, g.ID, g.Role, g.Leader, g.Term, g.FirstIndex, g.LastIndex, g.DurableIndex, g.CommitIndex, g.Progress)
		}
	}
}

// TestClusterGroupsChaos (ROSETTA_CLUSTER_GROUPS_CHAOS=<events>,
// scripts/chaos.sh): three members holding three replication groups under
// franz-go (idempotent and transactional producers, a KIP-848 consumer
// group), rocketmq-client-go sync sends with a push consumer and RocketMQ 5
// sends with a SimpleConsumer, through SIGKILLs of a group's leader, a
// member cut off with iptables, SIGTERMs and rolling restarts. It prints
// how long the groups the failed member led went without a leader and how
// long Kafka produces to them waited, and checks that every acknowledged
// message was received, idempotent records once and in order, every
// transaction whole, and committed offsets never moving backwards.
func TestClusterGroupsChaos(t *testing.T) {
	events, _ := strconv.Atoi(os.Getenv("ROSETTA_CLUSTER_GROUPS_CHAOS"))
	if events <= 0 || os.Getenv(envDir) != "" {
		t.Skip("set ROSETTA_CLUSTER_GROUPS_CHAOS to the number of failures")
	}
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=3")
	ctx := context.Background()
	spread := func() bool { return c.spread(ctx) }
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", spread)
	groupsAdmin(ctx, t, c, "groups-chaos")
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	kadmin := kadm.NewClient(kcl)
	for _, topic := range []string{"groups-chaos-kafka", "groups-chaos-txn"} {
		if resp, err := kadmin.CreateTopic(ctx, 6, 3, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	consumed := startGroupConsumer(t, c, "groups-chaos-kafka", "groups-chaos-audit")
	offsets := watchCommits(t, c, "groups-chaos-audit")
	kl := startLoad(t, c, "groups-chaos-kafka", 2)
	tl := startTxnLoad(t, c, "groups-chaos-txn")
	rl := startRemotingLoad(t, c, "groups-chaos")
	gl := startGRPCLoad(t, c, "groups-chaos-grpc", 1)
	apptest.Eventually(t, 30*time.Second, "sends acknowledged", func() bool {
		return rl.ackCount() > 100 && gl.ackCount() > 20 && kl.count() > 200
	})
	// kafkaBack is how long after at a Kafka record produced to a
	// partition of the victim's group (member m leads group m-1) was
	// acknowledged.
	kafkaBack := func(victim *member, at time.Time) time.Duration {
		g := int32(victim.id - 1)
		return kl.waitAckAfterIn(t, at, 45*time.Second, func(p int32) bool { return p%3 == g })
	}
	var kafkaKill, kafkaCut, kafkaStop []time.Duration

	// ledElsewhere waits until, as the survivor sees it, every group is
	// led by a member other than victim, and returns how long that took.
	ledElsewhere := func(victim, survivor *member, at time.Time) time.Duration {
		t.Helper()
		apptest.Eventually(t, 45*time.Second, "the failed member's groups led elsewhere", func() bool {
			st, ok := c.statusFrom(ctx, survivor)
			if !ok || len(st.Groups) != 3 {
				return false
			}
			for _, g := range st.Groups {
				if g.Leader == 0 || int(g.Leader) == victim.id {
					return false
				}
			}
			return true
		})
		return time.Since(at)
	}
	var killTimes, cutTimes, stopTimes []time.Duration
	for i := 0; i < events; i++ {
		victim := c.member(i%3 + 1)
		survivor := c.member((i+1)%3 + 1)
		at := time.Now()
		switch kind := i % 6; {
		case kind == 1 || kind == 4: // cut off
			cut := partition(t, victim.host, otherHosts(victim.host))
			if cut == nil {
				continue
			}
			at = time.Now() // the rules are in place
			d := ledElsewhere(victim, survivor, at)
			cutTimes = append(cutTimes, d)
			k := kafkaBack(victim, at)
			kafkaCut = append(kafkaCut, k)
			t.Logf("event %d at %s: member %d cut off: its group led elsewhere after %v, Kafka produce to it acknowledged after %v",
				i+1, at.Format("15:04:05.000"), victim.id, d.Round(time.Millisecond), k.Round(time.Millisecond))
			time.Sleep(2 * time.Second)
			cut()
		case kind == 2: // a graceful stop, or a rolling restart
			if i%12 == 8 {
				t.Logf("event %d at %s: rolling restart", i+1, at.Format("15:04:05.000"))
				for _, m := range c.members {
					c.stop(m)
					c.start(m)
					c.wait(m)
					apptest.Eventually(t, 60*time.Second, "leaders spread again", spread)
				}
				continue
			}
			c.stop(victim)
			d := ledElsewhere(victim, survivor, at)
			stopTimes = append(stopTimes, d)
			k := kafkaBack(victim, at)
			kafkaStop = append(kafkaStop, k)
			t.Logf("event %d at %s: SIGTERM of member %d: its group led elsewhere after %v, Kafka produce to it acknowledged after %v",
				i+1, at.Format("15:04:05.000"), victim.id, d.Round(time.Millisecond), k.Round(time.Millisecond))
			c.start(victim)
			c.wait(victim)
		default: // SIGKILL
			c.kill(victim)
			d := ledElsewhere(victim, survivor, at)
			killTimes = append(killTimes, d)
			k := kafkaBack(victim, at)
			kafkaKill = append(kafkaKill, k)
			t.Logf("event %d at %s: SIGKILL of member %d: its group led elsewhere after %v, Kafka produce to it acknowledged after %v",
				i+1, at.Format("15:04:05.000"), victim.id, d.Round(time.Millisecond), k.Round(time.Millisecond))
			c.start(victim)
			c.wait(victim)
		}
		apptest.Eventually(t, 60*time.Second, "leaders spread again", spread)
		time.Sleep(time.Second)
	}
	rl.stop()
	gl.stop()
	kl.stop()
	tl.stop()
	t.Logf("SIGKILLs: %s; next acknowledged Kafka produce to the group: %s", distribution(killTimes), distribution(kafkaKill))
	t.Logf("cut off: %s; Kafka: %s", distribution(cutTimes), distribution(kafkaCut))
	t.Logf("graceful stops: %s; Kafka: %s", distribution(stopTimes), distribution(kafkaStop))
	rl.verify(t)
	gl.verify(t)
	t.Logf("kafka idempotent: acknowledged %d records (%d failed)", len(kl.acks), kl.errs)
	verify(t, c, "groups-chaos-kafka", kl.acks)
	tl.verify(t, c)
	consumed.readAll(t, kl.acks, 90*time.Second)
	offsets.stop(t, true) // a franz-go group
}

// spreadTopic waits for each group to be led by its preferred member, then
// creates a Kafka topic of six partitions with three replicas through a
// client it returns (closed when the test ends).
func (c *cluster) spreadTopic(ctx context.Context, t *testing.T, topic string) *kgo.Client {
	t.Helper()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	if resp, err := kadm.NewClient(kcl).CreateTopic(ctx, 6, 3, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
	return kcl
}
