package route

import (
	"slices"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

func TestLegacyTable(t *testing.T) {
	all := []model.QueueID{10, 11, 12, 13, 14, 15, 16, 17}
	tab := Legacy(len(all), 3)
	locals := tab.Locals(len(all))
	seen := map[model.QueueID]int{}
	for g := range model.GroupID(3) {
		local := tab.Select(g, all)
		if len(local) != tab.Count(g, len(all)) {
			t.Fatalf("group %d: %d queues, Count says %d", g, len(local), tab.Count(g, len(all)))
		}
		for k, q := range local {
			i := tab.Global(g, k, len(all))
			if all[i] != q || tab.Group(i) != g || int(locals[i]) != k || i%3 != int(g) || k != i/3 {
				t.Fatalf("group %d local %d: global %d", g, k, i)
			}
			seen[q]++
		}
	}
	if len(seen) != len(all) {
		t.Fatalf("queues held: %v", seen)
	}
	var one Table
	if !slices.Equal(one.Select(0, all), all) || one.Count(0, 8) != 8 || one.Global(0, 5, 8) != 5 || one.Locals(8)[5] != 5 ||
		one.Select(1, all) != nil || Legacy(8, 1) != nil {
		t.Fatal("the nil table is not every queue in group 0")
	}
	if tab.Count(2, 2) != 0 || tab.Global(2, 0, 2) != -1 {
		t.Fatal("a group past a small topic's queues holds some")
	}
}

func TestExtend(t *testing.T) {
	// Placed over the groups from the start: round-robin, as Legacy.
	if got := Table(nil).Extend(0, 7, Spread(3)); !slices.Equal(got, Legacy(7, 3)) {
		t.Fatalf("extend from nothing %v", got)
	}
	// Grown: the same as placing the whole at once.
	if got := Legacy(5, 3).Extend(5, 4, Spread(3)); !slices.Equal(got, Legacy(9, 3)) {
		t.Fatalf("grown %v", got)
	}
	// Groups added: new queues fill the new groups first.
	got := Legacy(6, 3).Extend(6, 6, Spread(6))
	if want := (Table{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}); !slices.Equal(got, want) {
		t.Fatalf("grown over added groups %v, want %v", got, want)
	}
	// A subset of groups (a replication factor of their own).
	if got := Table(nil).Extend(0, 4, []model.GroupID{4, 7}); !slices.Equal(got, Table{4, 7, 4, 7}) {
		t.Fatalf("over groups 4 and 7: %v", got)
	}
	// One group stays nil.
	if got := Table(nil).Extend(3, 2, Spread(1)); got != nil {
		t.Fatalf("one group: %v", got)
	}
	// Per group: group 1 reaches 3 queues (a RocketMQ topic's count per
	// broker), adding to the others in turn.
	tab, added := Legacy(6, 3).ExtendGroup(6, 3, 1, Spread(3))
	if added != 2 || tab.Count(1, 8) != 3 || !slices.Equal(tab, Legacy(8, 3)) {
		t.Fatalf("per group: %v added %d", tab, added)
	}
	if _, added := Table(nil).ExtendGroup(4, 6, 0, Spread(1)); added != 2 {
		t.Fatalf("one group grown to 6 of 4: added %d", added)
	}
	if _, added := Legacy(6, 3).ExtendGroup(6, 3, 5, Spread(3)); added != 0 {
		t.Fatal("a group outside the spread got queues")
	}
}
