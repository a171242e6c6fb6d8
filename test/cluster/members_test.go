//go:build !race

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestClusterMembers grows a running cluster of three (three replication
// groups) to five members and shrinks it again, under idempotent Kafka
// producers: on five members group 0 keeps every member as a voter and the
// others three each (the new members join the groups the placement names
// as learners and are promoted, members the placement no longer names
// leave them); a member hosting no replica of a group relays RocketMQ 5
// clients to its leader; a member is SIGKILLed and removed, and the groups
// go on with the others; every acknowledged record is stored exactly once.
func TestClusterMembers(t *testing.T) {
	c := newCluster(t, envGroups+"=0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kcl := c.spreadTopic(ctx, t, "members")
	kl := startLoad(t, c, "members", 2)
	waitAcks := func(what string, n int) {
		t.Helper()
		want := kl.count() + n
		apptest.Eventually(t, 60*time.Second, what, func() bool { return kl.count() >= want })
	}
	waitAcks("records before the change", 2000)

	// Nodes 4 and 5 are added, each then started on an empty directory.
	start := time.Now()
	for _, id := range []int{4, 5} {
		if code := c.adminCallAt(ctx, t, c.member(2), http.MethodPost, "/api/v1/cluster/members", map[string]any{"node": id, "host": hosts[id-1]}, nil); code != http.StatusOK {
			t.Fatalf("add member %d: status %d", id, code)
		}
		t.Logf("member %d added to its groups as a learner in %v", id, time.Since(start).Round(time.Millisecond))
		c.startMember(id)
	}
	apptest.Eventually(t, 90*time.Second, "the groups placed over members 1–5", c.votersAre(ctx, 1, 2, 3, 4, 5))
	t.Logf("the groups placed over five members %v after the first was added", time.Since(start).Round(time.Millisecond))
	waitAcks("records after members 4 and 5 joined", 2000)
	checkFiveMembers(ctx, t, c, kcl)

	// Member 1 dies and is removed: the groups go on with 2–5.
	killed := time.Now()
	c.kill(c.member(1))
	kl.waitAckAfter(t, killed, 30*time.Second)
	start = time.Now()
	if code := c.adminCallAt(ctx, t, c.member(3), http.MethodDelete, "/api/v1/cluster/members/1", nil, nil); code != http.StatusOK {
		t.Fatalf("remove member 1: status %d", code)
	}
	apptest.Eventually(t, 90*time.Second, "the groups placed over members 2–5", c.votersAre(ctx, 2, 3, 4, 5))
	t.Logf("member 1 removed, the groups placed over the other four in %v", time.Since(start).Round(time.Millisecond))
	waitAcks("records after member 1 left", 2000)

	// One more failure: every group keeps a majority without member 2.
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
	apptest.Eventually(t, 90*time.Second, "every group with voters 2, 3 and 5", c.votersAre(ctx, 2, 3, 5))
	waitAcks("records after member 4 left", 1000)
	kl.stop()
	c.members = slices.DeleteFunc(c.members, func(m *member) bool { return m.id == 1 || m.id == 4 })
	verify(t, c, "members", kl.acks)
}

// checkFiveMembers checks a five-member cluster from member 1, which
// hosts group 0 alone: Kafka metadata names five brokers and three
// replicas for the other groups' partitions, its status names the groups'
// leaders, and RocketMQ 5 clients that reach it first (it sorts first) are
// relayed to every group's leader.
func checkFiveMembers(ctx context.Context, t *testing.T, c *cluster, kcl *kgo.Client) {
	t.Helper()
	st, ok := c.statusFrom(ctx, c.member(1))
	if !ok {
		t.Fatal("no status from member 1")
	}
	for _, g := range st.Groups {
		if g.ID != 0 && (g.Role != "none" || g.Leader == 0) {
			t.Errorf("member 1's view of group %d: role %q, leader %d (want none, a leader)", g.ID, g.Role, g.Leader)
		}
	}
	one, err := kgo.NewClient(kgo.SeedBrokers(c.addrs(0)[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	md, err := kadm.NewClient(one).Metadata(ctx, "members")
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 5 {
		t.Errorf("member 1's metadata names %d brokers, want 5", len(md.Brokers))
	}
	for _, p := range md.Topics["members"].Partitions {
		want := 3
		if p.Partition%3 == 0 {
			want = 5
		}
		if len(p.Replicas) != want || p.Leader < 0 {
			t.Errorf("partition %d: replicas %v, leader %d (want %d replicas)", p.Partition, p.Replicas, p.Leader, want)
		}
	}
	// Factors the cluster cannot place are refused: more copies than
	// members, an even factor.
	adm := kadm.NewClient(one)
	for _, rf := range []int16{7, 2} {
		if resp, err := adm.CreateTopic(ctx, 3, rf, nil, fmt.Sprint("members-rf", rf)); err == nil && !errors.Is(resp.Err, kerr.InvalidReplicationFactor) {
			t.Errorf("a topic of replication factor %d: %v, want INVALID_REPLICATION_FACTOR", rf, resp.Err)
		}
	}
	if resp, err := adm.CreateTopic(ctx, 3, -1, nil, "members-rf"); err != nil || resp.Err != nil || resp.ReplicationFactor != 3 {
		t.Errorf("a topic of the default replication factor: %v %v, factor %d (want 3)", err, resp.Err, resp.ReplicationFactor)
	}
	gl := startGRPCLoad(t, c, "members-grpc", 1)
	apptest.Eventually(t, 60*time.Second, "RocketMQ 5 sends through member 1", func() bool { return gl.ackCount() >= 300 })
	gl.stop()
	gl.verify(t)
}

// startMember starts member id (added to the cluster before) on an empty
// directory.
func (c *cluster) startMember(id int) {
	m := &member{id: id, dir: filepath.Join(c.root, fmt.Sprint("node", id)), host: hosts[id-1]}
	c.members = append(c.members, m)
	c.start(m)
	c.wait(m)
}

// votersAre says whether every group has a leader and, as its leader
// applied it, the voters its placement over the members ids names and no
// learner.
func (c *cluster) votersAre(ctx context.Context, ids ...model.NodeID) func() bool {
	return func() bool {
		for _, m := range c.members {
			st, ok := c.statusFrom(ctx, m)
			if !ok {
				continue
			}
			for _, g := range st.Groups {
				if g.Role == "leader" && (!slices.Equal(g.Replicas, placement(ids, g.ID)) || len(g.Learners) > 0) {
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

// placement is the voters of group g on members ids (in order): every
// member for group 0 and on up to three members, otherwise three from the
// g-th on, wrapping.
func placement(ids []model.NodeID, g model.GroupID) []model.NodeID {
	if g == 0 || len(ids) <= 3 {
		return ids
	}
	var out []model.NodeID
	for i := range 3 {
		out = append(out, ids[(int(g)+i)%len(ids)])
	}
	slices.Sort(out)
	return out
}
