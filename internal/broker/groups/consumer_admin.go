package groups

import (
	"fmt"
	"sort"
)

// Consumer group states as Kafka names them.
const (
	ConsumerEmpty       State = "Empty"
	ConsumerAssigning   State = "Assigning"
	ConsumerReconciling State = "Reconciling"
	ConsumerStable      State = "Stable"
)

// stateLocked is the group's state.
func (g *consumerGroup) stateLocked() State {
	switch {
	case len(g.members) == 0:
		return ConsumerEmpty
	case g.epoch > g.assignmentEpoch:
		return ConsumerAssigning
	}
	for _, m := range g.members {
		if m.epoch != g.assignmentEpoch || m.state != stateStable {
			return ConsumerReconciling
		}
	}
	return ConsumerStable
}

// describeConsumerBrief answers the classic DescribeGroups for a consumer
// group: Kafka describes it as Dead with nothing else (DescribeGroups up to
// v5), so classic tools do not misread it.
func (c *Coordinator) describeConsumerBrief(id string) (Description, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cgroups[id]; !ok {
		return Description{}, false
	}
	return Description{Type: "consumer", Group: id, State: Dead}, true
}

// listConsumerGroups lists the consumer-protocol groups.
func (c *Coordinator) listConsumerGroups() []Description {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Description, 0, len(c.cgroups))
	for id, g := range c.cgroups {
		out = append(out, Description{Type: "consumer", Group: id, State: g.stateLocked(), ProtocolType: "consumer"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// checkConsumerCommit validates an offset commit to a consumer-protocol
// group; handled is false for other groups. A commit without a member
// (epoch < 0) is allowed while the group is empty. A member commits with its
// current epoch, or with an older one for partitions it still owns that
// were assigned to it at or before that epoch — so offsets committed while
// revoking, or racing an epoch bump, are kept (as Kafka 4.3 does).
func (c *Coordinator) checkConsumerCommit(groupID, memberID string, epoch int32, parts []TopicPartitions) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.cgroups[groupID]
	if g == nil {
		return false, nil
	}
	if epoch < 0 && memberID == "" {
		if len(g.members) > 0 {
			return true, ErrUnknownMember
		}
		return true, nil
	}
	m := g.members[memberID]
	if m == nil {
		return true, fmt.Errorf("%w: %s is not a member of group %s", ErrUnknownMember, memberID, groupID)
	}
	if epoch == m.epoch {
		return true, nil
	}
	if epoch > m.epoch {
		return true, fmt.Errorf("%w: received %d, member is at %d", ErrStaleMemberEpoch, epoch, m.epoch)
	}
	for _, tp := range parts {
		for _, p := range tp.Partitions {
			e, ok := m.assigned[tp.Topic][p]
			if !ok {
				e, ok = m.pending[tp.Topic][p]
			}
			if !ok || e > epoch {
				return true, fmt.Errorf("%w: received %d, member is at %d", ErrStaleMemberEpoch, epoch, m.epoch)
			}
		}
	}
	return true, nil
}

// CheckOffsetFetch validates the member of an OffsetFetch (v9+) that names
// one: the member must exist and not claim an epoch newer than its own.
func (c *Coordinator) CheckOffsetFetch(groupID, memberID string, epoch int32) error {
	if memberID == "" && epoch < 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.cgroups[groupID]
	if g == nil {
		return nil // classic groups do not check fetches
	}
	m := g.members[memberID]
	if m == nil {
		return fmt.Errorf("%w: %s is not a member of group %s", ErrUnknownMember, memberID, groupID)
	}
	if epoch > m.epoch {
		return fmt.Errorf("%w: received %d, member is at %d", ErrStaleMemberEpoch, epoch, m.epoch)
	}
	return nil
}

// ConsumerMember describes one member of a consumer group.
type ConsumerMember struct {
	MemberID, InstanceID, RackID, ClientID, ClientHost string
	MemberEpoch                                        int32
	SubscribedTopicNames                               []string
	SubscribedTopicRegex                               string
	Assignment, TargetAssignment                       []TopicPartitions
}

// ConsumerDescription describes a consumer group (ConsumerGroupDescribe).
type ConsumerDescription struct {
	Group           string
	State           State
	Epoch           int32
	AssignmentEpoch int32
	Assignor        string
	Members         []ConsumerMember
}

// DescribeConsumerGroup describes a consumer-protocol group; other or
// unknown groups are ErrGroupNotFound.
func (c *Coordinator) DescribeConsumerGroup(id string) (ConsumerDescription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.cgroups[id]
	if g == nil {
		if c.groups[id] != nil {
			return ConsumerDescription{}, fmt.Errorf("%w: group %s is not a consumer group", ErrGroupNotFound, id)
		}
		return ConsumerDescription{}, fmt.Errorf("%w: group %s not found", ErrGroupNotFound, id)
	}
	d := ConsumerDescription{Group: id, State: g.stateLocked(), Epoch: g.epoch, AssignmentEpoch: g.assignmentEpoch,
		Assignor: g.assignor}
	if d.Assignor == "" {
		d.Assignor = AssignorUniform
	}
	for _, m := range g.members {
		d.Members = append(d.Members, ConsumerMember{MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID,
			ClientID: m.clientID, ClientHost: m.clientHost, MemberEpoch: m.epoch,
			SubscribedTopicNames: m.topicNames, SubscribedTopicRegex: m.regex,
			Assignment: m.assigned.list(), TargetAssignment: g.target[m.id].sorted()})
	}
	sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].MemberID < d.Members[j].MemberID })
	return d, nil
}
