//go:build !race

package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterSevenMembers: seven members started from one member list
// (the README's commands): the five lowest ids run the embedded etcd, the
// sixth and seventh are its clients; seven groups of three voters spread
// their leaders over all seven. A SIGKILL of an etcd member and of a
// client together leaves every partition acknowledging, and both come back
// (the client one rejoining as a client, not as an etcd member): every
// acknowledged record is stored once, in order.
func TestClusterSevenMembers(t *testing.T) {
	c := newClusterOf(t, 7, envGroups+"=0") // a group per member
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// etcdRoles counts each member's starts as an etcd member and as a
	// client.
	etcdRoles := func() (runs, clients []int) {
		for _, m := range c.members {
			runs = append(runs, len(c.logLines(m.id, "starting the embedded etcd member")))
			clients = append(clients, len(c.logLines(m.id, "this member is an etcd client")))
		}
		return runs, clients
	}
	if runs, clients := etcdRoles(); !slices.Equal(runs, []int{1, 1, 1, 1, 1, 0, 0}) || !slices.Equal(clients, []int{0, 0, 0, 0, 0, 1, 1}) {
		t.Fatalf("etcd members started %v, clients %v (by member)", runs, clients)
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs(0)[5:]...)) // through the etcd clients
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	resp, err := adm.CreateTopic(ctx, 7, -1, nil, "seven")
	if err != nil || resp.Err != nil || resp.ReplicationFactor != 3 {
		t.Fatalf("create: %v %v, factor %d", err, resp.Err, resp.ReplicationFactor)
	}
	apptest.Eventually(t, 60*time.Second, "seven brokers, one partition led by each, every replica in sync", func() bool {
		md, err := adm.Metadata(ctx, "seven")
		return err == nil && len(md.Brokers) == 7 && spreadOverSeven(md.Topics["seven"]) && inSync(md.Topics["seven"])
	})
	if st, ok := c.status(ctx); !ok || len(st.Groups) != 7 {
		t.Fatalf("cluster status: %v groups", len(st.Groups))
	} else {
		for _, g := range st.Groups {
			if n := len(g.Replicas); g.ID == 0 && n != 7 || g.ID != 0 && n != 3 {
				t.Errorf("group %d: replicas %v", g.ID, g.Replicas)
			}
		}
	}

	l := startPartitionLoads(t, c, "seven", 7)
	apptest.Eventually(t, 60*time.Second, "records in every partition", func() bool { return l.partitionsAcked(0) == 7 })
	// Member 3 runs an etcd member, member 7 is a client; no group has
	// both as voters (group 0 keeps five of its seven).
	etcdOne, client := c.member(3), c.member(7)
	c.kill(etcdOne)
	c.kill(client)
	killed := time.Now()
	apptest.Eventually(t, 60*time.Second, "every partition acknowledging again", func() bool { return l.partitionsAcked(killed.UnixNano()) == 7 })
	t.Logf("every partition acknowledged records %v after members 3 and 7 were SIGKILLed", time.Since(killed).Round(time.Millisecond))
	for _, m := range []*member{etcdOne, client} {
		c.start(m)
		c.wait(m)
	}
	back := time.Now()
	apptest.Eventually(t, 60*time.Second, "leaders spread over the seven again", func() bool {
		md, err := adm.Metadata(ctx, "seven")
		return err == nil && spreadOverSeven(md.Topics["seven"]) && l.partitionsAcked(back.UnixNano()) == 7
	})
	t.Logf("leaders spread over the seven members %v after both started", time.Since(back).Round(time.Millisecond))
	if runs, clients := etcdRoles(); !slices.Equal(runs, []int{1, 1, 2, 1, 1, 0, 0}) || !slices.Equal(clients, []int{0, 0, 0, 0, 0, 1, 2}) {
		t.Errorf("after the restarts: etcd members started %v, clients %v (by member)", runs, clients)
	}
	l.stop()
	verify(t, c, "seven", l.acks)
}

// inSync reports whether every partition of topic keeps at least three
// replicas (the one in group 0, all seven) and all are in sync.
func inSync(td kadm.TopicDetail) bool {
	for _, p := range td.Partitions {
		if len(p.Replicas) < 3 || len(p.ISR) != len(p.Replicas) {
			return false
		}
	}
	return len(td.Partitions) > 0
}

// spreadOverSeven reports whether each of seven members leads one of
// topic's partitions.
func spreadOverSeven(td kadm.TopicDetail) bool {
	if td.Err != nil {
		return false
	}
	var ls []int32
	for _, p := range td.Partitions {
		ls = append(ls, p.Leader)
	}
	slices.Sort(ls)
	return slices.Equal(ls, []int32{1, 2, 3, 4, 5, 6, 7})
}
