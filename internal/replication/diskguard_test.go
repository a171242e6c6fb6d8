package replication

import (
	"sync/atomic"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestFollowersStoreAtTheirDiskGuard: followers whose disk guard is
// reached (less free than the reserve, a segment still fits) go on storing
// their leader's records across segment rolls — refusing would stop their
// replicas, and with them the records (tier commits) that would free
// their disks.
func TestFollowersStoreAtTheirDiskGuard(t *testing.T) {
	var full [4]atomic.Bool
	c := newClusterFrom(&testCluster{t: t, net: &memNet{groups: map[model.NodeID]*Group{}, cut: map[model.NodeID]bool{}},
		nodes: map[model.NodeID]*replica{}, addrs: map[model.NodeID]string{}, minFree: 1 << 20,
		free: func(id model.NodeID) int64 {
			if full[id].Load() {
				return 768 << 10 // below reserve + a 256 KiB segment; a segment fits
			}
			return 1 << 40
		}}, 3)
	l := c.leader()
	for _, id := range c.ids {
		if id != l.id {
			full[id].Store(true)
		}
	}
	want := produceSized(t, l, 0, 3000, 200) // several segments
	c.converge(want)
	for _, id := range c.ids {
		if r := c.nodes[id]; r.group.Err() != nil {
			t.Fatalf("node %d's replica stopped: %v", id, r.group.Err())
		}
		if id != l.id && !c.nodes[id].engine.DiskFull() {
			t.Fatalf("follower %d is not at its disk guard", id)
		}
	}
}
