package topic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestMatch: the specification's examples.
func TestMatch(t *testing.T) {
	for _, c := range []struct {
		filter, name string
		want         bool
	}{
		{"sport/tennis/player1/#", "sport/tennis/player1", true},
		{"sport/tennis/player1/#", "sport/tennis/player1/ranking", true},
		{"sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true},
		{"sport/#", "sport", true},
		{"#", "sport/tennis", true},
		{"sport/tennis/+", "sport/tennis/player1", true},
		{"sport/tennis/+", "sport/tennis/player1/ranking", false},
		{"sport/+", "sport", false},
		{"sport/+", "sport/", true},
		{"+/+", "/finance", true},
		{"/+", "/finance", true},
		{"+", "/finance", false},
		{"#", "$SYS/uptime", false},
		{"+/monitor/Clients", "$SYS/monitor/Clients", false},
		{"$SYS/#", "$SYS/uptime", true},
		{"$SYS/monitor/+", "$SYS/monitor/Clients", true},
		{"a/b", "a/b", true},
		{"a/b", "a/b/c", false},
		{"a//b", "a//b", true},
		{"+/+/+", "a//b", true},
	} {
		if got := Match(c.filter, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.filter, c.name, got)
		}
	}
}

// TestValid: names and filters the specification refuses.
func TestValid(t *testing.T) {
	for _, f := range []string{"#", "a/#", "+", "+/b/+", "/", "a//b", "$SYS/#"} {
		if err := ValidFilter(f); err != nil {
			t.Errorf("filter %q: %v", f, err)
		}
	}
	for _, f := range []string{"", "a/#/b", "a#", "a/b+", "#/a"} {
		if ValidFilter(f) == nil {
			t.Errorf("filter %q accepted", f)
		}
	}
	for _, n := range []string{"", "a/+", "a/#"} {
		if ValidName(n) == nil {
			t.Errorf("name %q accepted", n)
		}
	}
	if g, f, ok, err := Shared("$share/grp/a/+"); !ok || err != nil || g != "grp" || f != "a/+" {
		t.Errorf("shared: %q %q %v %v", g, f, ok, err)
	}
	for _, f := range []string{"$share/grp", "$share//a", "$share/g+/a", "$share/g/a/#/b"} {
		if _, _, ok, err := Shared(f); !ok || err == nil {
			t.Errorf("shared %q accepted", f)
		}
	}
}

// TestTree: the tree finds exactly the filters Match accepts, as filters
// come and go.
func TestTree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	levels := []string{"a", "b", "", "$SYS", "c"}
	randomName := func() string {
		var parts []string
		for range 1 + rng.IntN(4) {
			parts = append(parts, levels[rng.IntN(len(levels))])
		}
		return strings.Join(parts, "/")
	}
	randomFilter := func() string {
		var parts []string
		n := 1 + rng.IntN(4)
		for i := range n {
			switch r := rng.IntN(6); {
			case r == 0:
				parts = append(parts, "+")
			case r == 1 && i == n-1:
				parts = append(parts, "#")
			default:
				parts = append(parts, levels[rng.IntN(len(levels))])
			}
		}
		return strings.Join(parts, "/")
	}
	var tree Tree[int]
	filters := map[int]string{}
	for round := range 2000 {
		id := rng.IntN(200)
		if f, ok := filters[id]; ok && rng.IntN(3) == 0 {
			tree.Remove(f, id)
			delete(filters, id)
		} else if !ok {
			filters[id] = randomFilter()
			tree.Add(filters[id], id)
		}
		if tree.Len() != len(filters) {
			t.Fatalf("round %d: %d in the tree, %d filters", round, tree.Len(), len(filters))
		}
		name := randomName()
		var got, want []int
		tree.Match(name, func(v int) { got = append(got, v) })
		for id, f := range filters {
			if Match(f, name) {
				want = append(want, id)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			var fs []string
			for _, id := range want {
				fs = append(fs, fmt.Sprintf("%d:%q", id, filters[id]))
			}
			t.Fatalf("round %d: %q matched %v, want %v (%s)", round, name, got, want, strings.Join(fs, " "))
		}
	}
}
