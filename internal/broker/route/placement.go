package route

import "github.com/rosettamq/rosetta/internal/model"

// Placement says which of a topic's queues a replication group holds when
// a cluster spreads queues over several groups: queue i (Kafka partition
// i) lives in group i mod Groups, as its queue i div Groups there (its
// RocketMQ queue id under the group's broker name). Growing a topic adds
// queues to the groups in turn and never moves one. The zero Placement is
// one group holding every queue.
type Placement struct {
	Group  model.GroupID
	Groups int
}

func (p Placement) n() int { return max(p.Groups, 1) }

// Holds reports whether the group holds queue i of a topic.
func (p Placement) Holds(i int) bool { return i%p.n() == int(p.Group) }

// GroupOf is the group holding queue i.
func GroupOf(i, groups int) model.GroupID { return model.GroupID(i % max(groups, 1)) }

// Local is queue i's index within its group.
func (p Placement) Local(i int) int { return i / p.n() }

// Global is the topic-wide index of the group's queue local.
func (p Placement) Global(local int) int { return local*p.n() + int(p.Group) }

// Count is how many of a topic's total queues the group holds.
func (p Placement) Count(total int) int {
	if g := int(p.Group); total > g {
		return (total-g-1)/p.n() + 1
	}
	return 0
}

// Total is the topic-wide queue count that gives every group local queues.
func (p Placement) Total(local int) int { return local * p.n() }

// Select returns the group's queues of a topic's queues (all of them with
// one group).
func (p Placement) Select(all []model.QueueID) []model.QueueID {
	if p.n() == 1 {
		return all
	}
	out := make([]model.QueueID, 0, p.Count(len(all)))
	for i := int(p.Group); i < len(all); i += p.n() {
		out = append(out, all[i])
	}
	return out
}
