package groups

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Consumer groups (KIP-848): the broker assigns partitions. Members
// heartbeat with their subscription and the partitions they own; the
// coordinator keeps a group epoch (bumped whenever membership, subscriptions
// or the subscribed topics change), computes a target assignment for it with
// a server-side assignor, and reconciles each member towards its target one
// heartbeat at a time: partitions to give up are revoked first (the member
// keeps its epoch until it reports them released), partitions still owned by
// another member are handed out only once released, and everything else
// moves at once. Nobody stops consuming the partitions that stay theirs.

// Errors of consumer groups.
var (
	ErrInvalidRequest       = errors.New("invalid request")
	ErrFencedMemberEpoch    = errors.New("fenced member epoch")
	ErrStaleMemberEpoch     = errors.New("stale member epoch")
	ErrUnsupportedAssignor  = errors.New("unsupported assignor")
	ErrUnreleasedInstanceID = errors.New("unreleased instance id")
	ErrInvalidRegex         = errors.New("invalid regular expression")
)

// Member epochs with a meaning of their own in a heartbeat.
const (
	epochJoin        = 0
	epochLeave       = -1
	epochLeaveStatic = -2
)

// memberState is where a member is in its reconciliation.
type memberState int

const (
	stateStable     memberState = iota
	stateUnrevoked              // waiting for the member to release revoked partitions
	stateUnreleased             // waiting for other members to release its new partitions
)

// cmember is one member of a consumer group.
type cmember struct {
	id, instanceID, rackID, clientID, clientHost string
	epoch, prevEpoch                             int32
	state                                        memberState
	topicNames                                   []string // sorted
	regex                                        string
	compiled                                     *regexp.Regexp
	assignor                                     string
	rebalanceTimeout                             time.Duration
	assigned, pending                            epochSet
	leftStatic                                   bool // left with epoch -2; keeps its assignment until its session ends
	sessionDeadline, revokeDeadline              time.Time
	timer                                        *time.Timer
}

// consumerGroup is a group using the consumer protocol.
type consumerGroup struct {
	id              string
	epoch           int32 // group epoch
	assignmentEpoch int32 // epoch of the target assignment
	members         map[string]*cmember
	instances       map[string]string     // instance id → member id
	target          map[string]Assignment // member id → target
	owners          map[partitionRef]string
	topicsVersion   uint64
	topicsSig       string
	assignor        string
}

// ConsumerHeartbeat is one ConsumerGroupHeartbeat. Nil fields mean "same as
// last time".
type ConsumerHeartbeat struct {
	Group, MemberID      string
	MemberEpoch          int32
	InstanceID, RackID   *string
	RebalanceTimeout     time.Duration // < 0: unchanged
	SubscribedTopicNames []string
	SubscribedTopicRegex *string
	ServerAssignor       *string
	Owned                []TopicPartitions
	ClientID, ClientHost string
}

// ConsumerHeartbeatResult is the answer to a heartbeat.
type ConsumerHeartbeatResult struct {
	MemberID          string
	MemberEpoch       int32
	HeartbeatInterval time.Duration
	// Assignment is the member's assignment when it must be sent (a join, a
	// full request or a change); nil otherwise.
	Assignment []TopicPartitions
}

// isFull reports whether the heartbeat carries the member's whole state.
func (h *ConsumerHeartbeat) isFull() bool {
	return h.RebalanceTimeout >= 0 && (h.SubscribedTopicNames != nil || h.SubscribedTopicRegex != nil) && h.Owned != nil
}

// validate checks a heartbeat as Kafka does.
func (h *ConsumerHeartbeat) validate() error {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidRequest, msg) }
	switch {
	case h.Group == "":
		return bad("group id can't be empty")
	case h.MemberID == "":
		return bad("member id can't be empty")
	case h.InstanceID != nil && *h.InstanceID == "":
		return bad("instance id can't be empty")
	case h.RackID != nil && *h.RackID == "":
		return bad("rack id can't be empty")
	case h.MemberEpoch < epochLeaveStatic:
		return bad("member epoch is invalid")
	case h.MemberEpoch == epochLeaveStatic && h.InstanceID == nil:
		return bad("instance id must be set to leave with epoch -2")
	case h.MemberEpoch == epochJoin && h.RebalanceTimeout < 0:
		return bad("rebalance timeout must be set when joining")
	case h.MemberEpoch == epochJoin && h.SubscribedTopicNames == nil && h.SubscribedTopicRegex == nil:
		return bad("subscribed topic names or regex must be set when joining")
	case h.MemberEpoch == epochJoin && len(h.Owned) > 0:
		return bad("owned partitions must be empty when joining")
	}
	if h.ServerAssignor != nil && *h.ServerAssignor != AssignorUniform && *h.ServerAssignor != AssignorRange {
		return fmt.Errorf("%w: %q", ErrUnsupportedAssignor, *h.ServerAssignor)
	}
	return nil
}

// consumerGroupLocked returns the consumer group id, creating it (or
// converting an empty classic group) when create is set. A classic group
// with members is not a consumer group.
func (c *Coordinator) consumerGroupLocked(id string, create bool) (*consumerGroup, error) {
	if g := c.cgroups[id]; g != nil {
		return g, nil
	}
	if c.sgroups[id] != nil {
		return nil, fmt.Errorf("%w: group %s is a share group", ErrGroupNotFound, id)
	}
	if cg := c.groups[id]; cg != nil {
		cg.mu.Lock()
		busy := len(cg.members) > 0
		cg.mu.Unlock()
		if busy || !create {
			return nil, fmt.Errorf("%w: group %s is not a consumer group", ErrGroupNotFound, id)
		}
		delete(c.groups, id)
		c.noteImage(id, nil, true)
	}
	if !create {
		return nil, fmt.Errorf("%w: group %s", ErrGroupNotFound, id)
	}
	g := &consumerGroup{id: id, members: map[string]*cmember{}, instances: map[string]string{},
		target: map[string]Assignment{}, owners: map[partitionRef]string{}}
	c.cgroups[id] = g
	return g, nil
}

// Heartbeat handles one consumer-group heartbeat.
func (c *Coordinator) ConsumerGroupHeartbeat(topics Topics, h ConsumerHeartbeat) (ConsumerHeartbeatResult, error) {
	if err := h.validate(); err != nil {
		return ConsumerHeartbeatResult{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g, err := c.consumerGroupLocked(h.Group, h.MemberEpoch == epochJoin)
	if err != nil {
		if h.MemberEpoch < 0 {
			return ConsumerHeartbeatResult{MemberID: h.MemberID, MemberEpoch: h.MemberEpoch}, nil
		}
		if h.MemberEpoch > 0 && errors.Is(err, ErrGroupNotFound) && c.groups[h.Group] == nil {
			return ConsumerHeartbeatResult{}, ErrUnknownMember
		}
		return ConsumerHeartbeatResult{}, err
	}
	now := c.opts.Now()
	if h.MemberEpoch < 0 {
		res := g.leaveLocked(c, h, now)
		c.persistConsumerLocked(g)
		return res, nil
	}
	m, joined, err := g.memberFor(c, h)
	if err != nil {
		return ConsumerHeartbeatResult{}, err
	}
	before := m.assigned
	if changed, err := m.update(h); err != nil {
		if joined {
			delete(g.members, m.id)
		}
		return ConsumerHeartbeatResult{}, err
	} else if changed {
		g.bump()
	}
	g.refreshTopicsLocked(topics)
	g.maybeAssignLocked(c, topics)
	g.reconcileLocked(m, h.Owned)
	if m.state == stateUnrevoked {
		if m.revokeDeadline.IsZero() {
			m.revokeDeadline = now.Add(m.rebalanceTimeout)
		}
	} else {
		m.revokeDeadline = time.Time{}
	}
	m.sessionDeadline = now.Add(c.sessionTimeout(g.id))
	c.armMemberTimerLocked(g, m)
	res := ConsumerHeartbeatResult{MemberID: m.id, MemberEpoch: m.epoch, HeartbeatInterval: c.heartbeatInterval(g)}
	if h.MemberEpoch == epochJoin || h.isFull() || !sameParts(before, m.assigned) {
		res.Assignment = m.assigned.list()
	}
	c.persistConsumerLocked(g)
	return res, nil
}

// consumerTimeouts are a group's session timeout and heartbeat interval:
// its own where its config sets them, else the coordinator's.
func (c *Coordinator) consumerTimeouts(group string) (session, heartbeat time.Duration) {
	return ownTimeouts(group, c.opts.ConsumerSessionTimeout, c.opts.ConsumerHeartbeatInterval, c.opts.ConsumerTimeouts)
}

// ownTimeouts are a group's session timeout and heartbeat interval: what
// own (its group config; nil: none) sets, else the defaults.
func ownTimeouts(group string, session, heartbeat time.Duration, own func(string) (time.Duration, time.Duration)) (time.Duration, time.Duration) {
	if own != nil {
		s, h := own(group)
		if s > 0 {
			session = s
		}
		if h > 0 {
			heartbeat = h
		}
	}
	return session, heartbeat
}

// sessionTimeout is a group's member session timeout.
func (c *Coordinator) sessionTimeout(group string) time.Duration {
	s, _ := c.consumerTimeouts(group)
	return s
}

// heartbeatInterval is the configured interval while the group is stable,
// and a tenth of it (at least 100 ms) while members still reconcile, so each
// step of a rebalance (revoke, confirm, assign) takes a fraction of an
// interval instead of a whole one.
func (c *Coordinator) heartbeatInterval(g *consumerGroup) time.Duration {
	_, d := c.consumerTimeouts(g.id)
	if g.stateLocked() == ConsumerStable {
		return d
	}
	return min(d, max(d/10, 100*time.Millisecond))
}

// memberFor finds the heartbeat's member, creating it on a join, replacing a
// static member that left temporarily, and fencing stale epochs.
func (g *consumerGroup) memberFor(c *Coordinator, h ConsumerHeartbeat) (*cmember, bool, error) {
	m := g.members[h.MemberID]
	if h.MemberEpoch != epochJoin {
		if m == nil {
			return nil, false, fmt.Errorf("%w: %s is not a member of group %s", ErrUnknownMember, h.MemberID, g.id)
		}
		if h.InstanceID != nil && *h.InstanceID != m.instanceID {
			return nil, false, ErrFencedInstance
		}
		if h.MemberEpoch > m.epoch ||
			h.MemberEpoch < m.epoch && (h.MemberEpoch != m.prevEpoch || !subsetOf(h.Owned, m.assigned)) {
			return nil, false, fmt.Errorf("%w: received %d, member is at %d", ErrFencedMemberEpoch, h.MemberEpoch, m.epoch)
		}
		m.leftStatic = false
		return m, false, nil
	}
	if h.InstanceID != nil {
		if prevID, ok := g.instances[*h.InstanceID]; ok && prevID != h.MemberID {
			prev := g.members[prevID]
			if prev != nil && !prev.leftStatic {
				return nil, false, fmt.Errorf("%w: instance %s is held by member %s", ErrUnreleasedInstanceID, *h.InstanceID, prevID)
			}
			if prev != nil {
				// The static member comes back under a new member id: it
				// takes over the old member's epoch and assignment.
				c.stopMemberTimer(prev)
				delete(g.members, prevID)
				prev.id = h.MemberID
				prev.leftStatic = false
				g.members[prev.id] = prev
				g.instances[*h.InstanceID] = prev.id
				if t, ok := g.target[prevID]; ok {
					delete(g.target, prevID)
					g.target[prev.id] = t
				}
				for ref, owner := range g.owners {
					if owner == prevID {
						g.owners[ref] = prev.id
					}
				}
				return prev, false, nil
			}
		}
	}
	if m != nil {
		m.leftStatic = false
		return m, false, nil // a rejoin after a lost response: same member, full assignment
	}
	m = &cmember{id: h.MemberID, assigned: epochSet{}, pending: epochSet{}, assignor: AssignorUniform}
	if h.InstanceID != nil {
		m.instanceID = *h.InstanceID
		g.instances[m.instanceID] = m.id
	}
	g.members[m.id] = m
	g.bump()
	return m, true, nil
}

// update applies the heartbeat's non-null fields; it reports whether the
// subscription or assignor changed (which bumps the group epoch).
func (m *cmember) update(h ConsumerHeartbeat) (bool, error) {
	changed := false
	if h.ClientID != "" {
		m.clientID, m.clientHost = h.ClientID, h.ClientHost
	}
	if h.RackID != nil {
		m.rackID = *h.RackID
	}
	if h.RebalanceTimeout >= 0 {
		m.rebalanceTimeout = h.RebalanceTimeout
	}
	if h.SubscribedTopicNames != nil {
		names := slices.Clone(h.SubscribedTopicNames)
		slices.Sort(names)
		names = slices.Compact(names)
		if !slices.Equal(names, m.topicNames) {
			m.topicNames, changed = names, true
		}
	}
	if h.SubscribedTopicRegex != nil && *h.SubscribedTopicRegex != m.regex {
		m.regex, m.compiled = *h.SubscribedTopicRegex, nil
		if m.regex != "" {
			re, err := regexp.Compile("^(?:" + m.regex + ")$")
			if err != nil {
				return false, fmt.Errorf("%w: %v", ErrInvalidRegex, err)
			}
			m.compiled = re
		}
		changed = true
	}
	if h.ServerAssignor != nil && *h.ServerAssignor != m.assignor {
		m.assignor, changed = *h.ServerAssignor, true
	}
	return changed, nil
}

// leaveLocked handles epoch -1 (leave) and -2 (a static member leaving for a
// while: it keeps its assignment until its session times out).
func (g *consumerGroup) leaveLocked(c *Coordinator, h ConsumerHeartbeat, now time.Time) ConsumerHeartbeatResult {
	res := ConsumerHeartbeatResult{MemberID: h.MemberID, MemberEpoch: h.MemberEpoch}
	m := g.members[h.MemberID]
	if m == nil {
		return res
	}
	if h.MemberEpoch == epochLeaveStatic {
		m.leftStatic = true
		m.sessionDeadline = now.Add(c.sessionTimeout(g.id))
		c.armMemberTimerLocked(g, m)
		return res
	}
	c.removeMemberLocked(g, m)
	return res
}

// bump starts a new group epoch: the target assignment is recomputed at the
// next heartbeat.
func (g *consumerGroup) bump() { g.epoch++ }

// removeMemberLocked drops a member and frees its partitions.
func (c *Coordinator) removeMemberLocked(g *consumerGroup, m *cmember) {
	c.stopMemberTimer(m)
	delete(g.members, m.id)
	delete(g.target, m.id)
	if m.instanceID != "" && g.instances[m.instanceID] == m.id {
		delete(g.instances, m.instanceID)
	}
	for ref, owner := range g.owners {
		if owner == m.id {
			delete(g.owners, ref)
		}
	}
	g.bump()
}

// armMemberTimerLocked (re)schedules the check that expires a member's
// session or fences it for not revoking within its rebalance timeout.
func (c *Coordinator) armMemberTimerLocked(g *consumerGroup, m *cmember) {
	deadline := m.sessionDeadline
	if !m.revokeDeadline.IsZero() && m.revokeDeadline.Before(deadline) {
		deadline = m.revokeDeadline
	}
	wait := deadline.Sub(c.opts.Now())
	if m.timer != nil {
		m.timer.Reset(wait)
		return
	}
	m.timer = time.AfterFunc(wait, func() { c.checkMember(g, m) })
}

func (c *Coordinator) stopMemberTimer(m *cmember) {
	if m.timer != nil {
		m.timer.Stop()
	}
}

// checkMember removes a member whose session ended or whose revocation is
// overdue.
func (c *Coordinator) checkMember(g *consumerGroup, m *cmember) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || g.members[m.id] != m {
		return
	}
	now := c.opts.Now()
	switch {
	case !now.Before(m.sessionDeadline):
		c.log.Info("consumer group member session expired", "group", g.id, "member", m.id)
	case !m.revokeDeadline.IsZero() && !now.Before(m.revokeDeadline):
		c.log.Info("consumer group member fenced: partitions not revoked within the rebalance timeout", "group", g.id, "member", m.id)
	default:
		c.armMemberTimerLocked(g, m)
		return
	}
	c.removeMemberLocked(g, m)
	if len(g.members) == 0 {
		g.owners = map[partitionRef]string{}
	}
	c.persistConsumerLocked(g)
}
