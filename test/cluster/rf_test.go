//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterReplicationFactors: on five members (made with one group), a
// Kafka topic of replication factor 5 and one of factor 1 each get groups
// of that many voters, made for them: Kafka metadata lists five replicas
// (all in sync) and one, the admin API names the groups, the factor-1
// partitions' leaders spread over the five members. A member's SIGKILL
// behaves as each factor promises: every factor-5 partition goes on
// (acks=all) with the member dropped from its ISR; the factor-1 partition
// whose one copy the member held takes nothing until it is back, the others
// go on. Every acknowledged record is stored once, in order.
func TestClusterReplicationFactors(t *testing.T) {
	c := newClusterOf(t, 5, envGroups+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	for _, tc := range []struct {
		topic string
		rf    int16
	}{{"rf5", 5}, {"rf1", 1}} {
		resp, err := adm.CreateTopic(ctx, 5, tc.rf, nil, tc.topic)
		if err != nil || resp.Err != nil || resp.ReplicationFactor != tc.rf {
			t.Fatalf("create %s: %v %v, factor %d", tc.topic, err, resp.Err, resp.ReplicationFactor)
		}
	}
	start := time.Now()
	leaders5 := waitReplicas(ctx, t, adm, "rf5", 5)
	leaders1 := waitReplicas(ctx, t, adm, "rf1", 1)
	t.Logf("partitions led and every replica in sync %v after the topics were made (factor-5 leaders %v, factor-1 leaders %v)",
		time.Since(start).Round(time.Millisecond), leaders5, leaders1)
	if slices.Sort(leaders1); !slices.Equal(slices.Compact(leaders1), []int32{1, 2, 3, 4, 5}) {
		t.Errorf("factor-1 partitions led by %v, want one on each member", leaders1)
	}
	g5, g1 := queueGroups(ctx, t, c, "rf5"), queueGroups(ctx, t, c, "rf1")
	if slices.ContainsFunc(g5, func(g int) bool { return slices.Contains(g1, g) || g == 0 }) {
		t.Errorf("queues' groups: factor 5 in %v, factor 1 in %v (group 0 keeps the cluster's factor)", g5, g1)
	}
	t.Logf("queues' groups: factor 5 in %v, factor 1 in %v", g5, g1)
	if st, ok := c.status(ctx); !ok {
		t.Error("no cluster status")
	} else {
		for _, g := range st.Groups {
			want := 3 // group 0, made with the cluster
			switch {
			case slices.Contains(g5, int(g.ID)):
				want = 5
			case slices.Contains(g1, int(g.ID)):
				want = 1
			}
			if g.Factor != want || len(g.Replicas) != min(want, 5) && g.ID != 0 {
				t.Errorf("group %d: factor %d, replicas %v (want factor %d)", g.ID, g.Factor, g.Replicas, want)
			}
		}
	}

	l5, l1 := startPartitionLoads(t, c, "rf5", 5), startPartitionLoads(t, c, "rf1", 5)
	apptest.Eventually(t, 60*time.Second, "records in every partition", func() bool { return l5.partitionsAcked(0) == 5 && l1.partitionsAcked(0) == 5 })

	// Member 3 dies.
	victim := c.member(3)
	lost := slices.Index(waitReplicasLeaders(ctx, t, adm, "rf1"), 3) // the factor-1 partition member 3 holds
	c.kill(victim)
	killed := time.Now() // it answers nothing from here on
	apptest.Eventually(t, 30*time.Second, "every factor-5 partition acknowledging again", func() bool { return l5.partitionsAcked(killed.UnixNano()) == 5 })
	t.Logf("every factor-5 partition acknowledged records %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	checkISR(ctx, t, c, "rf5", victim, 30*time.Second)
	apptest.Eventually(t, 30*time.Second, "the other factor-1 partitions acknowledging", func() bool { return l1.partitionsAcked(killed.UnixNano()) == 4 })
	time.Sleep(2 * time.Second)
	if n := l1.partitionsAcked(killed.UnixNano()); n != 4 || l1.ackedIn(int32(lost), killed.UnixNano()) {
		t.Fatalf("factor-1 partitions acknowledging after the SIGKILL: %d (partition %d's one copy is on the dead member)", n, lost)
	}
	c.start(victim)
	c.wait(victim)
	back := time.Now()
	apptest.Eventually(t, 60*time.Second, "partition "+fmt.Sprint(lost)+" acknowledging again", func() bool { return l1.ackedIn(int32(lost), back.UnixNano()) })
	t.Logf("factor-1 partition %d acknowledged again %v after its member's start", lost, time.Since(back).Round(time.Millisecond))
	checkISR(ctx, t, c, "rf5", nil, 60*time.Second)
	l5.stop()
	l1.stop()
	verify(t, c, "rf5", l5.acks)
	verify(t, c, "rf1", l1.acks)
}

// waitReplicas waits until every partition of topic lists rf replicas,
// all in sync, and a leader; it returns the leaders.
func waitReplicas(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, rf int) []int32 {
	t.Helper()
	var leaders []int32
	var got string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		md, err := adm.Metadata(ctx, topic)
		ok := err == nil && md.Topics[topic].Err == nil && len(md.Topics[topic].Partitions) > 0
		got, leaders = fmt.Sprint(err), nil
		if ok {
			got = ""
			for _, p := range md.Topics[topic].Partitions.Sorted() {
				got += fmt.Sprintf(" %d:%d%v/%v", p.Partition, p.Leader, p.Replicas, p.ISR)
				leaders = append(leaders, p.Leader)
				ok = ok && len(p.Replicas) == rf && len(p.ISR) == rf && p.Leader > 0 && p.Err == nil
			}
		}
		if ok {
			return leaders
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %d replicas in sync everywhere:%s", topic, rf, got)
		}
	}
}

// waitReplicasLeaders is each partition's leader of topic.
func waitReplicasLeaders(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) []int32 {
	t.Helper()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for _, p := range md.Topics[topic].Partitions.Sorted() {
		out = append(out, p.Leader)
	}
	return out
}

// partitionLoad produces to each partition from its own idempotent
// producer, one record at a time, so that a partition that takes nothing
// holds up no other; lastAck is when each partition's last acknowledged record was sent.
type partitionLoad struct {
	*load
	lastAck map[int32]int64 // partition → when its last acknowledged record was sent (unix nanoseconds), under load.mu
}

func startPartitionLoads(t *testing.T, c *cluster, topic string, partitions int) *partitionLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &partitionLoad{load: &load{c: c, cancel: cancel}, lastAck: map[int32]int64{}}
	for p := range int32(partitions) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.MetadataMinAge(250*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
			clientLog(fmt.Sprint(topic, "-", p)))
		if err != nil {
			t.Fatal(err)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer cl.Close()
			for i := 0; ctx.Err() == nil; i++ {
				v := fmt.Sprintf("p%d-%07d", p, i)
				sent := time.Now()
				r, err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(v)}).First()
				if err != nil {
					continue // not acknowledged (the load is stopping)
				}
				l.mu.Lock()
				l.acks = append(l.acks, ack{r.Partition, r.Offset, v, sent, time.Now()})
				l.lastAck[p] = sent.UnixNano() // sent after a kill: through the group as it is then
				l.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return l
}

// partitionsAcked counts the partitions that acknowledged a record sent
// after since (unix nanoseconds).
func (l *partitionLoad) partitionsAcked(since int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.lastAck {
		if at > since {
			n++
		}
	}
	return n
}

// ackedIn reports whether partition p acknowledged a record after since.
func (l *partitionLoad) ackedIn(p int32, since int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAck[p] > since
}
