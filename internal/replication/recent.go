package replication

import pb "go.etcd.io/raft/v3/raftpb"

// recentEntries keeps the entries Raft most recently asked this node to
// store, in index order, so a leader builds its followers' appends from
// memory instead of reading each record back from the log into fresh
// memory (a leader's copies used to cost more CPU than its appends). Raft
// never changes an entry once made; every append to the log passes
// through here (a conflicting append cuts the tail first), so an index
// held here is the log's. It belongs to the group's Raft goroutine.
type recentEntries struct {
	ents  []*pb.Entry // ents[i] has index first+i
	first uint64
	bytes int
	max   int
}

// recentMax bounds the bytes of entry data kept.
const recentMax = 32 << 20

// add records entries appended to the log (contiguous, in order).
func (c *recentEntries) add(ents []*pb.Entry) {
	if len(ents) == 0 {
		return
	}
	f := ents[0].GetIndex()
	switch last := c.first + uint64(len(c.ents)); {
	case len(c.ents) == 0 || f < c.first || f > last:
		c.reset()
		c.first = f
	case f < last: // a new leader's entries replace our tail
		for _, e := range c.ents[f-c.first:] {
			c.bytes -= len(e.Data)
		}
		clear(c.ents[f-c.first:])
		c.ents = c.ents[:f-c.first]
	}
	for _, e := range ents {
		c.ents = append(c.ents, e)
		c.bytes += len(e.Data)
	}
	limit := c.max
	if limit == 0 {
		limit = recentMax
	}
	drop := 0
	for c.bytes > limit && drop < len(c.ents)-1 {
		c.bytes -= len(c.ents[drop].Data)
		drop++
	}
	if drop > 0 {
		// Copy the kept pointers down so the dropped entries can go.
		n := copy(c.ents, c.ents[drop:])
		clear(c.ents[n:])
		c.ents = c.ents[:n]
		c.first += uint64(drop)
	}
}

func (c *recentEntries) reset() {
	clear(c.ents)
	c.ents, c.bytes = c.ents[:0], 0
}

// get returns entries [lo, hi) of at most maxSize bytes (at least one)
// when all of them are held.
func (c *recentEntries) get(lo, hi, maxSize uint64) ([]*pb.Entry, bool) {
	if lo < c.first || hi > c.first+uint64(len(c.ents)) || lo >= hi {
		return nil, false
	}
	held := c.ents[lo-c.first : hi-c.first]
	size, n := uint64(0), 0
	for n < len(held) {
		size += uint64(len(held[n].Data))
		if n > 0 && size > maxSize {
			break
		}
		n++
	}
	return append([]*pb.Entry(nil), held[:n]...), true // Raft may append to what it gets
}
