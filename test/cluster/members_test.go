//go:build !race

package cluster_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestClusterMembers adds a fourth member to a running cluster of three
// (three replication groups) and removes one, under idempotent Kafka
// producers: the new member joins every group as a learner and is
// promoted; a member is SIGKILLed and removed, and the groups go on with
// the other three; every acknowledged record is stored exactly once.
func TestClusterMembers(t *testing.T) {
	c := newCluster(t, envGroups+"=0")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	if resp, err := kadm.NewClient(kcl).CreateTopic(ctx, 6, 3, nil, "members"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	kl := startLoad(t, c, "members", 2)
	waitAcks := func(what string, n int) {
		t.Helper()
		want := kl.count() + n
		apptest.Eventually(t, 60*time.Second, what, func() bool { return kl.count() >= want })
	}
	waitAcks("records before the change", 2000)

	// Node 4 is added, then started on an empty directory.
	start := time.Now()
	if code := c.adminCallAt(ctx, t, c.member(2), http.MethodPost, "/api/v1/cluster/members", map[string]any{"node": 4, "host": hosts[3]}, nil); code != http.StatusOK {
		t.Fatalf("add member 4: status %d", code)
	}
	t.Logf("member 4 added to every group as a learner in %v", time.Since(start).Round(time.Millisecond))
	c.startFourth()
	apptest.Eventually(t, 90*time.Second, "every group with voters 1–4", c.votersAre(ctx, 1, 2, 3, 4))
	t.Logf("member 4 votes in every group %v after it was added", time.Since(start).Round(time.Millisecond))
	waitAcks("records after member 4 joined", 2000)

	// Member 1 dies and is removed: the groups go on with 2, 3 and 4.
	killed := time.Now()
	c.kill(c.member(1))
	kl.waitAckAfter(t, killed, 30*time.Second)
	start = time.Now()
	if code := c.adminCallAt(ctx, t, c.member(3), http.MethodDelete, "/api/v1/cluster/members/1", nil, nil); code != http.StatusOK {
		t.Fatalf("remove member 1: status %d", code)
	}
	apptest.Eventually(t, 60*time.Second, "every group with voters 2–4", c.votersAre(ctx, 2, 3, 4))
	t.Logf("member 1 removed from every group in %v", time.Since(start).Round(time.Millisecond))
	waitAcks("records after member 1 left", 2000)

	// One more failure: with 2, 3 and 4 voting, losing one of them leaves
	// a majority.
	killed = time.Now()
	victim := c.member(2)
	c.kill(victim)
	t.Logf("a record acknowledged %v after member 2's SIGKILL", kl.waitAckAfter(t, killed, 30*time.Second).Round(time.Millisecond))
	c.start(victim)
	c.wait(victim)
	waitAcks("records after member 2 came back", 1000)

	// A live member leading a group leaves: it hands its group off first,
	// and clients it still served go on through the others.
	apptest.Eventually(t, 60*time.Second, "member 4 leading a group", func() bool {
		st, ok := c.statusFrom(ctx, c.member(4))
		if !ok {
			return false
		}
		for _, g := range st.Groups {
			if g.Leader == 4 {
				return true
			}
		}
		return false
	})
	start = time.Now()
	if code := c.adminCallAt(ctx, t, c.member(4), http.MethodDelete, "/api/v1/cluster/members/4", nil, nil); code != http.StatusOK {
		t.Fatalf("remove member 4: status %d", code)
	}
	t.Logf("member 4, leading a group, removed from every group in %v", time.Since(start).Round(time.Millisecond))
	c.stop(c.member(4))
	apptest.Eventually(t, 60*time.Second, "every group with voters 2–3", c.votersAre(ctx, 2, 3))
	waitAcks("records after member 4 left", 1000)
	kl.stop()
	c.members = slices.DeleteFunc(c.members, func(m *member) bool { return m.id == 1 || m.id == 4 })
	verify(t, c, "members", kl.acks)
}

// startFourth starts member 4 (added to the cluster before) on an empty
// directory.
func (c *cluster) startFourth() {
	m4 := &member{id: 4, dir: filepath.Join(c.root, "node4"), host: hosts[3]}
	c.members = append(c.members, m4)
	c.start(m4)
	c.wait(m4)
}

// votersAre says whether every group has a leader and, as its leader
// applied it, exactly the voters want and no learner.
func (c *cluster) votersAre(ctx context.Context, want ...model.NodeID) func() bool {
	return func() bool {
		for _, m := range c.members {
			st, ok := c.statusFrom(ctx, m)
			if !ok {
				continue
			}
			for _, g := range st.Groups {
				if g.Role == "leader" && (!slices.Equal(g.Replicas, want) || len(g.Learners) > 0) {
					return false
				}
			}
		}
		st, ok := c.status(ctx)
		if !ok {
			return false
		}
		for _, g := range st.Groups {
			if g.Leader == 0 {
				return false
			}
		}
		return true
	}
}
