package groups

import (
	"context"
	"sort"
)

// Sync delivers the leader's assignments and returns this member's. A
// follower waits for the leader (or ctx).
func (c *Coordinator) Sync(ctx context.Context, groupID, memberID, instanceID string, generation int32, assignments map[string][]byte) ([]byte, string, error) {
	g := c.group(groupID, false)
	if g == nil {
		return nil, "", ErrUnknownMember
	}
	g.mu.Lock()
	m, err := g.checkMemberLocked(memberID, instanceID, generation)
	if err != nil {
		g.mu.Unlock()
		return nil, "", err
	}
	g.touchLocked(m)
	switch g.state {
	case PreparingRebalance:
		g.mu.Unlock()
		return nil, "", ErrRebalanceInProgress
	case Stable:
		a, p := m.assignment, g.protocol
		g.mu.Unlock()
		return a, p, nil
	}
	// CompletingRebalance
	if memberID == g.leader {
		for id, mm := range g.members {
			mm.assignment = assignments[id]
			if mm.assignment == nil {
				mm.assignment = []byte{}
			}
			if mm.syncCh != nil && id != memberID {
				mm.syncCh <- syncOutcome{assignment: mm.assignment}
				mm.syncCh = nil
			}
		}
		g.state = Stable
		g.persistLocked()
		a, p := m.assignment, g.protocol
		g.mu.Unlock()
		return a, p, nil
	}
	ch := make(chan syncOutcome, 1)
	m.syncCh = ch
	p := g.protocol
	g.mu.Unlock()
	select {
	case out := <-ch:
		return out.assignment, p, out.err
	case <-ctx.Done():
		g.mu.Lock()
		if m.syncCh == ch {
			m.syncCh = nil
		}
		g.mu.Unlock()
		return nil, "", ctx.Err()
	}
}

func (g *group) checkMemberLocked(memberID, instanceID string, generation int32) (*member, error) {
	if instanceID != "" {
		if id, ok := g.instances[instanceID]; ok && id != memberID {
			return nil, ErrFencedInstance
		}
	}
	m, ok := g.members[memberID]
	if !ok {
		return nil, ErrUnknownMember
	}
	if generation != g.generation {
		return nil, ErrIllegalGeneration
	}
	return m, nil
}

// Heartbeat keeps a member alive and tells it whether to rejoin.
func (c *Coordinator) Heartbeat(groupID, memberID, instanceID string, generation int32) error {
	g := c.group(groupID, false)
	if g == nil {
		return ErrUnknownMember
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.members[memberID]
	if !ok {
		return ErrUnknownMember
	}
	if instanceID != "" && g.instances[instanceID] != memberID {
		return ErrFencedInstance
	}
	g.touchLocked(m)
	if g.state == PreparingRebalance {
		return ErrRebalanceInProgress
	}
	if generation != g.generation {
		return ErrIllegalGeneration
	}
	return nil
}

// LeaveMember identifies a member leaving: by member id, or by instance id.
type LeaveMember struct {
	MemberID   string
	InstanceID string
}

// Leave removes members; the per-member errors come back in order.
func (c *Coordinator) Leave(groupID string, leaving []LeaveMember) []error {
	errs := make([]error, len(leaving))
	g := c.group(groupID, false)
	if g == nil {
		for i := range errs {
			errs[i] = ErrUnknownMember
		}
		return errs
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	removed := false
	for i, l := range leaving {
		id := l.MemberID
		if l.InstanceID != "" {
			mid, ok := g.instances[l.InstanceID]
			if !ok {
				errs[i] = ErrUnknownMember
				continue
			}
			if id != "" && id != mid {
				errs[i] = ErrFencedInstance
				continue
			}
			id = mid
		}
		if _, ok := g.members[id]; !ok {
			errs[i] = ErrUnknownMember
			continue
		}
		g.removeLocked(id)
		removed = true
	}
	if removed {
		g.afterRemovalLocked()
	}
	return errs
}

// CheckCommit validates an offset commit's member and generation. A commit
// with generation < 0 comes from outside any group membership and is
// allowed while the group has no members.
//
// For a consumer-protocol group the generation is the member epoch; parts
// are the partitions committed (see checkConsumerCommit).
func (c *Coordinator) CheckCommit(groupID, memberID, instanceID string, generation int32, parts []TopicPartitions) error {
	if handled, err := c.checkConsumerCommit(groupID, memberID, generation, parts); handled {
		return err
	}
	g := c.group(groupID, false)
	if generation < 0 && memberID == "" {
		if g == nil {
			return nil
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.members) > 0 {
			return ErrUnknownMember
		}
		return nil
	}
	if g == nil {
		return ErrUnknownMember
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m, err := g.checkMemberLocked(memberID, instanceID, generation)
	if err != nil {
		if err == ErrIllegalGeneration && g.state == PreparingRebalance {
			return ErrRebalanceInProgress
		}
		return err
	}
	g.touchLocked(m)
	return nil
}

// Description describes a group.
type Description struct {
	Type         string // "classic", "consumer" or "share"
	Group        string
	State        State
	ProtocolType string
	Protocol     string
	Generation   int32
	Members      []MemberDescription
}

// MemberDescription describes one member.
type MemberDescription struct {
	MemberID, InstanceID, ClientID, ClientHost string
	Metadata, Assignment                       []byte
}

// Describe returns a group's description; unknown groups are Dead.
func (c *Coordinator) Describe(groupID string) Description {
	if d, ok := c.describeConsumerBrief(groupID); ok {
		return d
	}
	if d, ok := c.describeShareBrief(groupID); ok {
		return d
	}
	g := c.group(groupID, false)
	if g == nil {
		return Description{Group: groupID, State: Dead}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d := Description{Type: "classic", Group: g.id, State: g.state, ProtocolType: g.protocolType, Protocol: g.protocol, Generation: g.generation}
	for _, m := range g.members {
		d.Members = append(d.Members, MemberDescription{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID,
			ClientHost: m.clientHost, Metadata: m.metadataFor(g.protocol), Assignment: m.assignment})
	}
	sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].MemberID < d.Members[j].MemberID })
	return d
}

// List returns every group's id, state and protocol type.
func (c *Coordinator) List() []Description {
	c.mu.Lock()
	ids := make([]string, 0, len(c.groups))
	for id := range c.groups {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	sort.Strings(ids)
	out := make([]Description, 0, len(ids))
	for _, id := range ids {
		d := c.Describe(id)
		if d.State != Dead {
			out = append(out, Description{Type: d.Type, Group: d.Group, State: d.State, ProtocolType: d.ProtocolType})
		}
	}
	out = append(out, c.listConsumerGroups()...)
	return append(out, c.listShareGroups()...)
}

// Delete removes an empty group's membership state. Offsets are deleted by
// the caller.
func (c *Coordinator) Delete(groupID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sg := c.sgroups[groupID]; sg != nil {
		if len(sg.members) > 0 {
			return ErrGroupNotEmpty
		}
		delete(c.sgroups, groupID)
		c.noteImage(groupID, nil, true)
		return nil
	}
	if cg := c.cgroups[groupID]; cg != nil {
		if len(cg.members) > 0 {
			return ErrGroupNotEmpty
		}
		delete(c.cgroups, groupID)
		c.noteImage(groupID, nil, true)
		return nil
	}
	g := c.groups[groupID]
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.members) > 0 {
		return ErrGroupNotEmpty
	}
	g.state = Dead
	delete(c.groups, groupID)
	g.persistLocked()
	return nil
}

// Close stops every timer and the image writer.
func (c *Coordinator) Close() {
	c.stopPersist()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, g := range c.cgroups {
		for _, m := range g.members {
			c.stopMemberTimer(m)
		}
	}
	for _, g := range c.sgroups {
		for _, m := range g.members {
			if m.timer != nil {
				m.timer.Stop()
			}
		}
	}
	for _, g := range c.groups {
		g.mu.Lock()
		if g.rebalance != nil {
			g.rebalance.Stop()
		}
		for _, m := range g.members {
			if m.sessionTimer != nil {
				m.sessionTimer.Stop()
			}
		}
		g.mu.Unlock()
	}
}
