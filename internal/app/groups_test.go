package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestCheckGroups: the first member records the cluster's number of
// groups; a member configured otherwise is refused, and so is a number of
// groups above one for a cluster made (with topics) before groups were
// recorded.
func TestCheckGroups(t *testing.T) {
	ctx := context.Background()
	store := func(t *testing.T) meta.Store {
		s, err := meta.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	member := func(s meta.Store, groups int) *App {
		c := DefaultConfig()
		c.Cluster.Groups = groups
		return &App{cfg: c, meta: s, log: slog.New(slog.DiscardHandler)}
	}
	s := store(t)
	if err := member(s, 3).checkGroups(ctx); err != nil {
		t.Fatalf("the first member: %v", err)
	}
	if err := member(s, 3).checkGroups(ctx); err != nil {
		t.Fatalf("a member configured alike: %v", err)
	}
	if err := member(s, 1).checkGroups(ctx); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("a member with one group: %v", err)
	}

	old := store(t)
	if _, err := old.Txn(ctx, nil, []meta.Op{{Key: "topics/public/default/orders", Value: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	if err := member(old, 3).checkGroups(ctx); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("three groups on a cluster made with one: %v", err)
	}
	if err := member(old, 1).checkGroups(ctx); err != nil {
		t.Fatalf("one group on a cluster made with one: %v", err)
	}

	// Unset, the number is the recorded one, else one per member for a
	// new cluster, else one for a cluster made before it was recorded.
	resolve := func(s meta.Store) int {
		a := member(s, 0)
		a.replica = &replica{groups: []*groupReplica{{}}}
		a.replica.setMembers(map[model.NodeID]string{1: "a", 2: "b", 3: "c"})
		if err := a.resolveGroups(ctx); err != nil {
			t.Fatal(err)
		}
		if len(a.replica.groups) != a.cfg.Cluster.Groups {
			t.Fatalf("%d group replicas for %d groups", len(a.replica.groups), a.cfg.Cluster.Groups)
		}
		return a.cfg.Cluster.Groups
	}
	if n := resolve(s); n != 3 {
		t.Fatalf("recorded 3, resolved %d", n)
	}
	if n := resolve(store(t)); n != 3 {
		t.Fatalf("a new cluster of three members: %d groups", n)
	}
	if n := resolve(old); n != 1 {
		t.Fatalf("a cluster made with topics before groups were recorded: %d groups", n)
	}
}

func TestGroupVoters(t *testing.T) {
	members := func(n int) map[model.NodeID]string {
		m := map[model.NodeID]string{}
		for i := 1; i <= n; i++ {
			m[model.NodeID(i*10)] = fmt.Sprint("127.0.0.", 10+i)
		}
		return m
	}
	for _, tc := range []struct {
		members, factor int
		g               model.GroupID
		want            []model.NodeID
	}{
		{3, 3, 0, []model.NodeID{10, 20, 30}},
		{3, 3, 2, []model.NodeID{30, 10, 20}}, // every member, the preferred leader first
		{5, 3, 0, []model.NodeID{10, 20, 30, 40, 50}},
		{5, 3, 1, []model.NodeID{20, 30, 40}},
		{5, 3, 4, []model.NodeID{50, 10, 20}}, // wrapping
		{5, 0, 4, []model.NodeID{50, 10, 20}}, // unset: the default
		{5, 5, 3, []model.NodeID{40, 50, 10, 20, 30}},
		{4, 1, 2, []model.NodeID{30}},
		{2, 3, 1, []model.NodeID{20, 10}},
	} {
		if got := groupVoters(members(tc.members), tc.g, tc.factor); !slices.Equal(got, tc.want) {
			t.Errorf("%d members, factor %d, group %d: %v, want %v", tc.members, tc.factor, tc.g, got, tc.want)
		}
	}
}

// TestResolveReplicationFactor: the first member records the cluster's
// replication factor (3 unless configured); members unset take it, and a
// member configured otherwise is refused.
func TestResolveReplicationFactor(t *testing.T) {
	ctx := context.Background()
	s, err := meta.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	member := func(factor int) (*App, error) {
		c := DefaultConfig()
		c.Cluster.ReplicationFactor = factor
		a := &App{cfg: c, meta: s, log: slog.New(slog.DiscardHandler), replica: &replica{}}
		return a, a.resolveReplicationFactor(ctx)
	}
	if a, err := member(5); err != nil || a.replica.factor != 5 {
		t.Fatalf("the first member: %v, factor %d", err, a.replica.factor)
	}
	if a, err := member(0); err != nil || a.replica.factor != 5 {
		t.Fatalf("a member unset: %v, factor %d", err, a.replica.factor)
	}
	if _, err := member(3); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("a member configured with 3: %v", err)
	}
	// A cluster that ran before the factor was recorded keeps every
	// member in every group.
	old, err := meta.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.Txn(ctx, nil, []meta.Op{{Key: groupMembersKey(0), Value: []byte(`{"voters":[1,2,3,4]}`)}}); err != nil {
		t.Fatal(err)
	}
	a := &App{cfg: DefaultConfig(), meta: old, log: slog.New(slog.DiscardHandler), replica: &replica{}}
	if err := a.resolveReplicationFactor(ctx); err != nil || a.replica.factor != maxMembers {
		t.Fatalf("a cluster made before the factor was recorded: %v, factor %d", err, a.replica.factor)
	}

	c := DefaultConfig()
	c.Cluster.ReplicationFactor = 2
	if err := c.Validate(); err == nil {
		t.Fatal("a replication factor of 2 accepted")
	}
}
