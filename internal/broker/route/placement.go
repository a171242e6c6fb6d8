package route

import (
	"slices"

	"github.com/rosettamq/rosetta/internal/model"
)

// Table is where a topic's queues live when a cluster spreads them over
// several replication groups: entry i is the group holding queue i (Kafka
// partition i), recorded with the topic so that adding groups never moves
// a queue. A queue's index within its group — its RocketMQ queue id under
// the group's broker name — is its rank among the topic's queues of that
// group. A nil table is one group (0) holding every queue: a single node,
// or a cluster of one group.
type Table []model.GroupID

// Legacy is the table of a topic recorded before tables were: n queues,
// queue i in group i mod groups (nil for one group).
func Legacy(n, groups int) Table {
	if groups <= 1 {
		return nil
	}
	t := make(Table, n)
	for i := range t {
		t[i] = model.GroupID(i % groups)
	}
	return t
}

// Group is the group holding queue i.
func (t Table) Group(i int) model.GroupID {
	if i < 0 || i >= len(t) {
		return 0
	}
	return t[i]
}

// Locals gives each of n queues its index within its group.
func (t Table) Locals(n int) []int32 {
	out := make([]int32, n)
	if t == nil {
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	seen := map[model.GroupID]int32{}
	for i := range out {
		g := t.Group(i)
		out[i] = seen[g]
		seen[g]++
	}
	return out
}

// Count is how many of n queues group g holds.
func (t Table) Count(g model.GroupID, n int) int {
	if t == nil {
		if g == 0 {
			return n
		}
		return 0
	}
	c := 0
	for i := range n {
		if t.Group(i) == g {
			c++
		}
	}
	return c
}

// Select returns group g's queues of a topic's queues, in order.
func (t Table) Select(g model.GroupID, all []model.QueueID) []model.QueueID {
	if t == nil {
		if g == 0 {
			return all
		}
		return nil
	}
	var out []model.QueueID
	for i, q := range all {
		if t.Group(i) == g {
			out = append(out, q)
		}
	}
	return out
}

// Global is the topic-wide index of group g's queue local (-1 when the
// group holds fewer queues).
func (t Table) Global(g model.GroupID, local, n int) int {
	if t == nil {
		if g == 0 && local < n {
			return local
		}
		return -1
	}
	for i := range n {
		if t.Group(i) == g {
			if local == 0 {
				return i
			}
			local--
		}
	}
	return -1
}

// Extend places n more queues after have over the groups of spread: each
// goes to the group of spread holding the fewest of the topic's queues —
// on a tie the one round-robin placement would give it — so a topic grown
// after groups were added gets its new queues on the new groups, and one
// placed over spread from the start is placed round-robin. A table of one
// group stays nil.
func (t Table) Extend(have, n int, spread []model.GroupID) Table {
	if len(spread) == 0 || t == nil && len(spread) == 1 && spread[0] == 0 {
		return t
	}
	out := make(Table, have, have+n)
	copy(out, t)
	counts := map[model.GroupID]int{}
	for _, g := range out {
		counts[g]++
	}
	for i := have; i < have+n; i++ {
		pick := spread[i%len(spread)]
		for _, g := range spread {
			if counts[g] < counts[pick] {
				pick = g
			}
		}
		out = append(out, pick)
		counts[pick]++
	}
	return out
}

// ExtendGroup places queues after have over spread, as Extend does, until
// group g holds n of them (a RocketMQ topic's queues per broker); it
// returns the table and how many queues were added.
func (t Table) ExtendGroup(have, n int, g model.GroupID, spread []model.GroupID) (Table, int) {
	if !slices.Contains(spread, g) {
		return t, 0
	}
	out, total := t, have
	for out.Count(g, total) < n {
		out = out.Extend(total, 1, spread)
		total++
	}
	return out, total - have
}

// Spread is the groups 0..n-1.
func Spread(n int) []model.GroupID {
	out := make([]model.GroupID, max(n, 1))
	for i := range out {
		out[i] = model.GroupID(i)
	}
	return out
}

// Placement is a broker's share of the cluster's queues: the replication
// group it serves, how many groups a topic recorded without a table spreads
// over (Legacy), and the groups a new queue may go to.
type Placement struct {
	Group model.GroupID
	// Groups: the groups the cluster was made with (topics recorded
	// without a table spread over them).
	Groups int
	// Spread, when set, is the groups new queues of a topic of factor
	// copies (0: the cluster's) go to now — the groups of that many voters
	// (groups are added while the cluster runs); nil: 0..Groups-1 for
	// every factor.
	Spread func(factor int) []model.GroupID
}

// Several reports whether queues spread, or may come to spread, over more
// than one group (a cluster member's broker: groups can be added).
func (p Placement) Several() bool { return p.Groups > 1 || p.Spread != nil }

// EveryGroup is the factor NewQueues reads as every group, whatever its
// voters.
const EveryGroup = -1

// NewQueues are the groups new queues of a topic of factor copies go to
// (none when no group has that many voters; every group for EveryGroup).
func (p Placement) NewQueues(factor int) []model.GroupID {
	if p.Spread != nil {
		return p.Spread(factor)
	}
	return Spread(p.Groups)
}

// TableOf is a stored topic's table: as recorded, else Legacy.
func (p Placement) TableOf(recorded []model.GroupID, n int) Table {
	if recorded != nil {
		return recorded
	}
	return Legacy(n, p.Groups)
}
