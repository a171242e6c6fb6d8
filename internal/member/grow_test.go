package member

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestAddGroups: groups added are recorded after the ones the cluster was
// made with, each with its factor; a member settling afterwards and one
// following the record see them; factors the cluster cannot place and
// more than the cluster takes are refused with nothing recorded.
func TestAddGroups(t *testing.T) {
	ctx := context.Background()
	s, err := meta.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	three := placement.Members{1: "a", 2: "b", 3: "c"}
	m := testMember(s, Config{Groups: 3, Members: three})
	m.factor = 3
	if err := m.resolveGroups(ctx); err != nil || len(m.Groups()) != 3 {
		t.Fatalf("settled %d groups: %v", len(m.Groups()), err)
	}
	ids, err := m.AddGroups(ctx, 2, 0)
	if err != nil || !slices.Equal(ids, []model.GroupID{3, 4}) {
		t.Fatalf("added %v: %v", ids, err)
	}
	if ids, err = m.AddGroups(ctx, 1, 1); err != nil || !slices.Equal(ids, []model.GroupID{5}) {
		t.Fatalf("added %v: %v", ids, err)
	}
	for _, bad := range []struct{ n, factor int }{{0, 0}, {1, 2}, {1, 5}, {11, 0}} {
		if _, err := m.AddGroups(ctx, bad.n, bad.factor); !errors.Is(err, model.ErrInvalidConfig) {
			t.Fatalf("add %d of factor %d: %v", bad.n, bad.factor, err)
		}
	}
	// This member follows the record; one settling now opens all six.
	if fresh := m.growTo(mustAdded(t, m)); len(fresh) != 3 || fresh[0].ID() != 3 || len(m.Groups()) != 6 {
		t.Fatalf("grown by %d to %d groups", len(fresh), len(m.Groups()))
	}
	if m.FactorOf(4) != 3 || m.FactorOf(5) != 1 || m.FactorOf(0) != 3 || len(m.Placed(5)) != 1 || len(m.Placed(4)) != 3 {
		t.Fatalf("factors %d %d %d", m.FactorOf(4), m.FactorOf(5), m.FactorOf(0))
	}
	later := testMember(s, Config{Members: three})
	if err := later.resolveGroups(ctx); err != nil || len(later.Groups()) != 6 || later.MadeGroups() != 3 {
		t.Fatalf("a member settling later: %d groups (%d made): %v", len(later.Groups()), later.MadeGroups(), err)
	}
}

func mustAdded(t *testing.T, m *Member) []AddedGroup {
	t.Helper()
	added, _, err := m.loadAdded(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return added
}
