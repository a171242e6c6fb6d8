package replication

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// reconcile calls Reconcile on the group's leader until it has nothing
// left to do and every live member applied want as the voters.
func (c *testCluster) reconcile(want []model.NodeID) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		l := c.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		step, err := l.group.Reconcile(ctx, want)
		cancel()
		if err == nil && step.Kind == "" {
			l.group.publishStatusSoon()
			done := true
			for _, id := range want {
				r := c.nodes[id]
				if r == nil || r.group == nil {
					continue
				}
				if st := r.group.Status(); !slices.Equal(st.Voters, want) || len(st.Learners) > 0 {
					done = false
				}
			}
			if done {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("membership did not become %v", want)
}

// TestMembershipChanges adds a fourth member to a group of three (as a
// learner, then a voter), removes a follower and then the leader itself,
// with records appended between every change: every member holds every
// record, and the logs stay identical.
func TestMembershipChanges(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	want := produce(t, l, 0, 50)

	// Node 4 joins: it starts with the membership the group had once it
	// was added as a learner.
	ctx := context.Background()
	step, err := l.group.Reconcile(ctx, []model.NodeID{1, 2, 3, 4})
	if err != nil || step != (MembershipStep{"add-learner", 4}) {
		t.Fatalf("first step: %+v %v", step, err)
	}
	var m Membership
	for deadline := time.Now().Add(5 * time.Second); ; {
		l.group.publishStatusSoon()
		st := l.group.Status()
		if slices.Equal(st.Learners, []model.NodeID{4}) {
			m = Membership{Voters: st.Voters, Learners: st.Learners}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("learner not added: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.ids = append(c.ids, 4)
	c.nodes[4] = &replica{id: 4, dir: filepath.Join(t.TempDir(), "node4"), joined: &m}
	c.start(4)
	want = append(want, produce(t, c.leader(), 50, 50)...)
	// Appends go on while the learner is promoted: none fails (they wait
	// while the change is stored).
	l = c.leader()
	stop := make(chan struct{})
	appended := make(chan []string)
	go func() {
		var out []string
		for i := 100; ; i++ {
			select {
			case <-stop:
				appended <- out
				return
			default:
			}
			p := fmt.Sprintf("m%05d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := l.engine.Append(ctx, []*storage.Record{{Queue: 1, Count: 1, Payload: []byte(p)}})
			cancel()
			if err != nil {
				t.Errorf("append %s during the membership change: %v", p, err)
				appended <- out
				return
			}
			out = append(out, p)
		}
	}()
	c.reconcile([]model.NodeID{1, 2, 3, 4})
	close(stop)
	during := <-appended
	want = append(want, during...)
	want = append(want, produce(t, c.leader(), 100+len(during), 20)...)
	c.converge(want)
	c.sameLogs()

	// A follower leaves.
	l = c.leader()
	var gone model.NodeID
	for _, id := range c.ids {
		if id != l.id {
			gone = id
			break
		}
	}
	rest := slices.DeleteFunc(slices.Clone(c.ids), func(id model.NodeID) bool { return id == gone })
	c.reconcile(rest)
	c.stop(gone)
	c.ids = rest
	want = append(want, produce(t, c.leader(), 200000, 20)...)
	c.converge(want)

	// The leader leaves: it hands off first, and the new leader removes it.
	l = c.leader()
	rest = slices.DeleteFunc(slices.Clone(c.ids), func(id model.NodeID) bool { return id == l.id })
	c.reconcile(rest)
	if nl := c.leader(); nl.id == l.id {
		t.Fatal("removed member still leads")
	}
	c.stop(l.id)
	c.ids = rest
	want = append(want, produce(t, c.leader(), 200100, 20)...)
	c.converge(want)
	c.sameLogs()
	if got := fmt.Sprint(c.leader().group.Status().Voters); got != fmt.Sprint(rest) {
		t.Fatalf("voters %s, want %v", got, rest)
	}
}
