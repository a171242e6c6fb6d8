package groups

import (
	"slices"
	"sort"
)

// Server-side assignors of consumer groups (KIP-848). Both are pure: given
// the members' subscriptions (already resolved to topics) and the previous
// target assignment, they return the new target assignment.

// Assignor names a client may ask for.
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

// assignorMember is one member as an assignor sees it.
type assignorMember struct {
	id     string
	topics []TopicMeta // subscribed topics that exist, sorted by id
	prev   Assignment  // previous target assignment (for stickiness)
}

// partitionRef is one topic partition.
type partitionRef struct {
	topic TopicID
	part  int32
}

// assignUniform spreads every subscribed partition so that members' counts
// differ by at most one where subscriptions allow, keeping each member's
// previous partitions where that stays balanced (sticky, like the client's
// cooperative-sticky assignor).
func assignUniform(members []assignorMember) map[string]Assignment {
	ids := make([]string, len(members))
	eligible := map[TopicID][]int{} // topic → member indexes subscribed to it
	var all []partitionRef
	for i, m := range members {
		ids[i] = m.id
		for _, t := range m.topics {
			if _, seen := eligible[t.ID]; !seen {
				for p := int32(0); p < t.Partitions; p++ {
					all = append(all, partitionRef{t.ID, p})
				}
			}
			eligible[t.ID] = append(eligible[t.ID], i)
		}
	}
	owner := make(map[partitionRef]int, len(all))
	load := make([]int, len(members))
	subscribed := func(i int, t TopicID) bool { return slices.Contains(eligible[t], i) }
	// Quota: with everyone subscribed to everything, at most ceil(P/M) each;
	// otherwise the balancing pass below evens things out.
	maxQuota := len(all)
	if len(members) > 0 {
		maxQuota = (len(all) + len(members) - 1) / len(members)
	}
	exists := make(map[partitionRef]bool, len(all))
	for _, p := range all {
		exists[p] = true
	}
	// 1. Keep previous partitions that are still valid, up to the quota.
	for i, m := range members {
		for _, tp := range m.prev.sorted() {
			for _, p := range tp.Partitions {
				ref := partitionRef{tp.Topic, p}
				if _, taken := owner[ref]; taken || !exists[ref] || !subscribed(i, tp.Topic) || load[i] >= maxQuota {
					continue
				}
				owner[ref] = i
				load[i]++
			}
		}
	}
	// 2. Hand out the rest, each to the least loaded eligible member.
	for _, ref := range all {
		if _, taken := owner[ref]; taken {
			continue
		}
		best := -1
		for _, i := range eligible[ref.topic] {
			if best < 0 || load[i] < load[best] || load[i] == load[best] && ids[i] < ids[best] {
				best = i
			}
		}
		owner[ref] = best
		load[best]++
	}
	// 3. Balance: move partitions from a member to an eligible one holding
	// at least two fewer, until no such move exists.
	for moves := 0; moves < len(all)*len(members)+1; moves++ {
		moved := false
		for _, ref := range all {
			from := owner[ref]
			for _, to := range eligible[ref.topic] {
				if load[to]+1 < load[from] {
					owner[ref] = to
					load[from]--
					load[to]++
					moved = true
					break
				}
			}
		}
		if !moved {
			break
		}
	}
	out := make(map[string]Assignment, len(members))
	for _, m := range members {
		out[m.id] = Assignment{}
	}
	for _, ref := range all {
		out[ids[owner[ref]]].add(ref.topic, ref.part)
	}
	return out
}

// assignRange gives each member, per topic, a contiguous range of the
// topic's partitions, members of the topic taken in id order (the classic
// range assignor, computed on the broker).
func assignRange(members []assignorMember) map[string]Assignment {
	byTopic := map[TopicID][]string{}
	parts := map[TopicID]int32{}
	out := make(map[string]Assignment, len(members))
	for _, m := range members {
		out[m.id] = Assignment{}
		for _, t := range m.topics {
			byTopic[t.ID] = append(byTopic[t.ID], m.id)
			parts[t.ID] = t.Partitions
		}
	}
	for t, ids := range byTopic {
		sort.Strings(ids)
		n, m := int(parts[t]), len(ids)
		per, extra := n/m, n%m
		next := 0
		for i, id := range ids {
			k := per
			if i < extra {
				k++
			}
			for p := next; p < next+k; p++ {
				out[id].add(t, int32(p))
			}
			next += k
		}
	}
	return out
}
