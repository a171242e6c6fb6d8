package placement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

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
		if got := Voters(members(tc.members), tc.g, tc.factor); !slices.Equal(got, tc.want) {
			t.Errorf("%d members, factor %d, group %d: %v, want %v", tc.members, tc.factor, tc.g, got, tc.want)
		}
	}
}

func TestPreferredLeaderSpreadsGroups(t *testing.T) {
	m := Members{3: "c", 1: "a", 2: "b"}
	var got []model.NodeID
	for g := range model.GroupID(6) {
		got = append(got, PreferredLeader(m, g))
		if v := Voters(m, g, 3); v[0] != got[g] {
			t.Errorf("group %d: voters %v do not start with the preferred leader %d", g, v, got[g])
		}
	}
	if want := []model.NodeID{1, 2, 3, 1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("preferred leaders %v, want %v", got, want)
	}
	if PreferredLeader(Members{}, 1) != 0 || Voters(Members{}, 1, 3) != nil {
		t.Fatal("no members: a leader or voters")
	}
}

func TestGroupPortAndDir(t *testing.T) {
	if p, ok := GroupPort("127.0.0.1:9876", 2); !ok || p != 9878 {
		t.Fatalf("GroupPort: %d %v", p, ok)
	}
	if _, ok := GroupPort("127.0.0.1:0", 2); ok {
		t.Fatal("an ephemeral port has no group port")
	}
	if GroupDir("/d", 0) != "/d" || GroupDir("/d", 3) != "/d/groups/3" {
		t.Fatal(GroupDir("/d", 0), GroupDir("/d", 3))
	}
}
