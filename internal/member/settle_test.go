package member

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/rosettamq/rosetta/internal/member/directory"
	"github.com/rosettamq/rosetta/internal/member/placement"
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
	member := func(s meta.Store, groups int) *Member {
		return testMember(s, Config{Groups: groups})
	}
	s := store(t)
	if err := member(s, 3).CheckGroups(ctx); err != nil {
		t.Fatalf("the first member: %v", err)
	}
	if err := member(s, 3).CheckGroups(ctx); err != nil {
		t.Fatalf("a member configured alike: %v", err)
	}
	if err := member(s, 1).CheckGroups(ctx); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("a member with one group: %v", err)
	}

	old := store(t)
	if _, err := old.Txn(ctx, nil, []meta.Op{{Key: "topics/public/default/orders", Value: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	if err := member(old, 3).CheckGroups(ctx); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("three groups on a cluster made with one: %v", err)
	}
	if err := member(old, 1).CheckGroups(ctx); err != nil {
		t.Fatalf("one group on a cluster made with one: %v", err)
	}

	// Unset, the number is the recorded one, else one per member for a
	// new cluster, else one for a cluster made before it was recorded.
	resolve := func(s meta.Store) int {
		m := testMember(s, Config{Members: placement.Members{1: "a", 2: "b", 3: "c"}})
		if err := m.resolveGroups(ctx); err != nil {
			t.Fatal(err)
		}
		if len(m.groups) != m.cfg.Groups {
			t.Fatalf("%d group replicas for %d groups", len(m.groups), m.cfg.Groups)
		}
		return m.cfg.Groups
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
	member := func(factor int) (*Member, error) {
		m := testMember(s, Config{ReplicationFactor: factor})
		return m, m.resolveReplicationFactor(ctx)
	}
	if m, err := member(5); err != nil || m.factor != 5 {
		t.Fatalf("the first member: %v, factor %d", err, m.factor)
	}
	if m, err := member(0); err != nil || m.factor != 5 {
		t.Fatalf("a member unset: %v, factor %d", err, m.factor)
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
	if _, err := old.Txn(ctx, nil, []meta.Op{{Key: directory.GroupMembersKey(0), Value: []byte(`{"voters":[1,2,3,4]}`)}}); err != nil {
		t.Fatal(err)
	}
	m := testMember(old, Config{})
	if err := m.resolveReplicationFactor(ctx); err != nil || m.factor != placement.MaxReplicationFactor {
		t.Fatalf("a cluster made before the factor was recorded: %v, factor %d", err, m.factor)
	}
}

// testMember is a member over store s that has not started.
func testMember(s meta.Store, c Config) *Member {
	c.Self, c.MaxGroups, c.Logger = 1, 16, slog.New(slog.DiscardHandler)
	if c.Members == nil {
		c.Members = placement.Members{1: "a"}
	}
	m := &Member{cfg: c, log: c.Logger, clock: WallClock{}, store: s, dir: directory.New(s, 1, c.Members)}
	m.groups = []*Group{{dir: m.dir}}
	return m
}
