package groups

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// subscribedTopics resolves a member's subscription (names and regex) to
// the topics that exist, sorted by id.
func (m *cmember) subscribedTopics(topics Topics, all []TopicMeta) []TopicMeta {
	seen := map[TopicID]bool{}
	var out []TopicMeta
	for _, n := range m.topicNames {
		if t, ok := topics.ByName(n); ok && !seen[t.ID] {
			seen[t.ID] = true
			out = append(out, t)
		}
	}
	if m.compiled != nil {
		for _, t := range all {
			if !seen[t.ID] && m.compiled.MatchString(t.Name) {
				seen[t.ID] = true
				out = append(out, t)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].ID[:], out[j].ID[:]) < 0 })
	return out
}

// refreshTopicsLocked bumps the group epoch when a subscribed topic appears,
// disappears or grows (checked only when the topic set has changed).
func (g *consumerGroup) refreshTopicsLocked(topics Topics) {
	v := topics.Version()
	if v == g.topicsVersion && g.topicsSig != "" {
		return
	}
	g.topicsVersion = v
	all := g.allIfRegex(topics)
	var sig strings.Builder
	seen := map[TopicID]bool{}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, t := range g.members[id].subscribedTopics(topics, all) {
			if !seen[t.ID] {
				seen[t.ID] = true
				fmt.Fprintf(&sig, "%x:%d;", t.ID, t.Partitions)
			}
		}
	}
	s := "v1|" + sig.String()
	if s != g.topicsSig {
		if g.topicsSig != "" {
			g.bump()
		}
		g.topicsSig = s
	}
}

// allIfRegex lists every topic when some member subscribes by regex.
func (g *consumerGroup) allIfRegex(topics Topics) []TopicMeta {
	for _, m := range g.members {
		if m.compiled != nil {
			return topics.All()
		}
	}
	return nil
}

// preferredAssignor is the assignor most members ask for (uniform on a tie
// or when nobody asks).
func (g *consumerGroup) preferredAssignor() string {
	counts := map[string]int{}
	for _, m := range g.members {
		counts[m.assignor]++
	}
	if counts[AssignorRange] > counts[AssignorUniform] {
		return AssignorRange
	}
	return AssignorUniform
}

// maybeAssignLocked computes the target assignment of the current group
// epoch if it is not computed yet.
func (g *consumerGroup) maybeAssignLocked(c *Coordinator, topics Topics) {
	if g.assignmentEpoch == g.epoch {
		return
	}
	all := g.allIfRegex(topics)
	members := make([]assignorMember, 0, len(g.members))
	for id, m := range g.members {
		members = append(members, assignorMember{id: id, topics: m.subscribedTopics(topics, all), prev: g.target[id]})
	}
	sort.Slice(members, func(i, j int) bool { return members[i].id < members[j].id })
	g.assignor = g.preferredAssignor()
	if g.assignor == AssignorRange {
		g.target = assignRange(members)
	} else {
		g.target = assignUniform(members)
	}
	g.assignmentEpoch = g.epoch
	c.log.Debug("consumer group target assignment", "group", g.id, "epoch", g.epoch, "assignor", g.assignor, "members", len(members))
}

// reconcileLocked moves a member one step towards its target assignment.
// owned is what the member reported owning (nil: not reported).
func (g *consumerGroup) reconcileLocked(m *cmember, owned []TopicPartitions) {
	switch m.state {
	case stateStable:
		if m.epoch == g.assignmentEpoch {
			return
		}
	case stateUnrevoked:
		if ownsAny(owned, m.pending) {
			return
		}
	}
	g.releaseOwnership(m)
	g.computeNext(m, owned)
	g.claimOwnership(m)
}

// computeNext is one reconciliation step (Kafka's CurrentAssignmentBuilder):
// keep what stays, revoke what goes (keeping the epoch until the member
// confirms), and take new partitions nobody else holds any more.
func (g *consumerGroup) computeNext(m *cmember, owned []TopicPartitions) {
	target := g.target[m.id]
	assigned, revoke := epochSet{}, epochSet{}
	var toAssign []partitionRef
	unreleased := false
	topicsSeen := map[TopicID]bool{}
	handle := func(t TopicID) {
		if topicsSeen[t] {
			return
		}
		topicsSeen[t] = true
		want := map[int32]bool{}
		for _, p := range target[t] {
			want[p] = true
		}
		for p, e := range m.assigned[t] {
			if want[p] {
				assigned.put(t, p, e)
			} else {
				revoke.put(t, p, e)
			}
		}
		for _, p := range target[t] {
			if assigned.has(t, p) {
				continue
			}
			if owner, held := g.owners[partitionRef{t, p}]; held && owner != m.id {
				unreleased = true
				continue
			}
			toAssign = append(toAssign, partitionRef{t, p})
		}
	}
	for t := range m.assigned {
		handle(t)
	}
	for t := range target {
		handle(t)
	}
	setEpoch := func(e int32) {
		if e != m.epoch {
			m.prevEpoch, m.epoch = m.epoch, e
		}
	}
	switch {
	case !revoke.empty() && ownsAny(owned, revoke):
		m.state = stateUnrevoked
		m.assigned, m.pending = assigned, revoke
	default:
		for _, ref := range toAssign {
			assigned.put(ref.topic, ref.part, g.assignmentEpoch)
		}
		m.state = stateStable
		if unreleased {
			m.state = stateUnreleased
		}
		m.assigned, m.pending = assigned, epochSet{}
		setEpoch(g.assignmentEpoch)
	}
}

// releaseOwnership forgets the partitions a member holds (before a step).
func (g *consumerGroup) releaseOwnership(m *cmember) {
	for _, s := range []epochSet{m.assigned, m.pending} {
		for t, ps := range s {
			for p := range ps {
				if g.owners[partitionRef{t, p}] == m.id {
					delete(g.owners, partitionRef{t, p})
				}
			}
		}
	}
}

// claimOwnership records the partitions a member holds (after a step).
func (g *consumerGroup) claimOwnership(m *cmember) {
	for _, s := range []epochSet{m.assigned, m.pending} {
		for t, ps := range s {
			for p := range ps {
				g.owners[partitionRef{t, p}] = m.id
			}
		}
	}
}
