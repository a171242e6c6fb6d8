package replication

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func entries(first, n uint64, term uint64, size int) []*pb.Entry {
	var out []*pb.Entry
	for i := range n {
		out = append(out, &pb.Entry{Index: new(first + i), Term: new(term), Data: make([]byte, size)})
	}
	return out
}

// TestRecentEntries: held ranges come back (bounded by size, at least one
// entry), a conflicting append replaces the tail, a gap starts over, and
// the oldest go past the byte bound.
func TestRecentEntries(t *testing.T) {
	c := recentEntries{max: 10_000}
	c.add(entries(5, 10, 1, 100)) // 5..14
	if got, ok := c.get(5, 15, 1<<20); !ok || len(got) != 10 || got[0].GetIndex() != 5 {
		t.Fatalf("get all: %v %d", ok, len(got))
	}
	if got, ok := c.get(6, 15, 250); !ok || len(got) != 2 {
		t.Fatalf("size-bounded get: %v %d", ok, len(got))
	}
	if got, ok := c.get(6, 15, 1); !ok || len(got) != 1 {
		t.Fatalf("at least one: %v %d", ok, len(got))
	}
	if _, ok := c.get(4, 8, 1<<20); ok {
		t.Fatal("an index before the first held")
	}
	if _, ok := c.get(10, 16, 1<<20); ok {
		t.Fatal("an index past the last held")
	}
	c.add(entries(12, 2, 2, 100)) // a new leader's 12..13 replace 12..14
	got, ok := c.get(10, 14, 1<<20)
	if !ok || len(got) != 4 || got[2].GetTerm() != 2 || got[3].GetTerm() != 2 {
		t.Fatalf("after a conflicting append: %v %v", ok, got)
	}
	if _, ok := c.get(14, 15, 1<<20); ok {
		t.Fatal("the replaced tail is still held")
	}
	c.add(entries(20, 1, 2, 100)) // a gap: start over
	if _, ok := c.get(13, 14, 1<<20); ok || c.first != 20 {
		t.Fatalf("after a gap: first %d", c.first)
	}
	c.add(entries(21, 200, 2, 100)) // 20,000 bytes over a 10,000 bound
	if c.bytes > 10_000 || c.first+uint64(len(c.ents)) != 221 {
		t.Fatalf("bound: %d bytes, first %d, %d held", c.bytes, c.first, len(c.ents))
	}
	if _, ok := c.get(c.first, 221, 1<<20); !ok {
		t.Fatal("the newest are not held")
	}
}
