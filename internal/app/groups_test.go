package app

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
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
