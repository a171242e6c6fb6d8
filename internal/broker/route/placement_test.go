package route

import (
	"slices"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

func TestPlacement(t *testing.T) {
	all := []model.QueueID{10, 11, 12, 13, 14, 15, 16, 17}
	seen := map[model.QueueID]int{}
	for g := range 3 {
		p := Placement{Group: model.GroupID(g), Groups: 3}
		local := p.Select(all)
		if len(local) != p.Count(len(all)) {
			t.Fatalf("group %d: %d queues, Count says %d", g, len(local), p.Count(len(all)))
		}
		for k, q := range local {
			i := p.Global(k)
			if all[i] != q || !p.Holds(i) || p.Local(i) != k || GroupOf(i, 3) != p.Group {
				t.Fatalf("group %d local %d: global %d", g, k, i)
			}
			seen[q]++
		}
		if p.Count(p.Total(4)) != 4 {
			t.Fatalf("group %d: Total(4) gives %d", g, p.Count(p.Total(4)))
		}
	}
	if len(seen) != len(all) {
		t.Fatalf("queues held: %v", seen)
	}
	one := Placement{}
	if !slices.Equal(one.Select(all), all) || one.Count(8) != 8 || one.Total(8) != 8 || !one.Holds(5) || one.Local(5) != 5 {
		t.Fatal("the zero placement is not every queue")
	}
	if (Placement{Group: 2, Groups: 3}).Count(2) != 0 {
		t.Fatal("a group past a small topic's queues holds some")
	}
}
