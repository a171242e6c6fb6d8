package groups

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"time"
)

// Share groups (KIP-932): members heartbeat with the topics they
// subscribe to and get partitions; unlike consumer groups a partition may
// be assigned to several members at once (records, not partitions, are what
// members hold, and the partition's leader hands each record to one member
// at a time), so nothing is revoked before it moves: every member takes the
// assignment of the group's latest epoch at its next heartbeat. Member ids
// are the clients' own (KIP-1082).

// AssignorSimple is the share groups' assignor.
const AssignorSimple = "simple"

// Share group states as Kafka names them.
const (
	ShareEmpty  State = "Empty"
	ShareStable State = "Stable"
)

// smember is one member of a share group.
type smember struct {
	id, rackID, clientID, clientHost string
	epoch                            int32
	topicNames                       []string // sorted
	assigned                         Assignment
	sent                             bool // the current assignment was sent to the member
	sessionDeadline                  time.Time
	timer                            *time.Timer
}

// shareGroup is a share group.
type shareGroup struct {
	id              string
	epoch           int32
	assignmentEpoch int32
	members         map[string]*smember
	topicsVersion   uint64
	topicsSig       string
}

// ShareHeartbeat is one ShareGroupHeartbeat. Nil fields mean "same as last
// time".
type ShareHeartbeat struct {
	Group, MemberID      string
	MemberEpoch          int32
	RackID               *string
	SubscribedTopicNames []string
	ClientID, ClientHost string
}

// ShareHeartbeatResult is the answer to a share group heartbeat.
type ShareHeartbeatResult struct {
	MemberEpoch       int32
	HeartbeatInterval time.Duration
	// Assignment is the member's assignment when it must be sent (a join,
	// a heartbeat naming its topics, or a change); nil otherwise.
	Assignment []TopicPartitions
}

func (h *ShareHeartbeat) validate() error {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidRequest, msg) }
	switch {
	case h.Group == "":
		return bad("group id can't be empty")
	case h.MemberID == "":
		return bad("member id can't be empty")
	case len(h.MemberID) > 36:
		return bad("member id can't be longer than 36 characters")
	case h.RackID != nil && *h.RackID == "":
		return bad("rack id can't be empty")
	case h.MemberEpoch < epochLeave:
		return bad("member epoch is invalid")
	case h.MemberEpoch == epochJoin && len(h.SubscribedTopicNames) == 0:
		return bad("subscribed topic names must be set in the first request")
	}
	return nil
}

// shareGroupLocked returns the share group id, creating it when create is
// set; a classic or consumer group of that id is not a share group.
func (c *Coordinator) shareGroupLocked(id string, create bool) (*shareGroup, error) {
	if g := c.sgroups[id]; g != nil {
		return g, nil
	}
	if c.groups[id] != nil || c.cgroups[id] != nil {
		return nil, fmt.Errorf("%w: group %s is not a share group", ErrGroupNotFound, id)
	}
	if !create {
		return nil, fmt.Errorf("%w: group %s", ErrGroupNotFound, id)
	}
	g := &shareGroup{id: id, members: map[string]*smember{}}
	c.sgroups[id] = g
	return g, nil
}

// ShareGroupHeartbeat handles one share group heartbeat.
func (c *Coordinator) ShareGroupHeartbeat(topics Topics, h ShareHeartbeat) (ShareHeartbeatResult, error) {
	if err := h.validate(); err != nil {
		return ShareHeartbeatResult{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g, err := c.shareGroupLocked(h.Group, h.MemberEpoch == epochJoin)
	if err != nil {
		if h.MemberEpoch == epochLeave {
			return ShareHeartbeatResult{MemberEpoch: epochLeave}, nil
		}
		if h.MemberEpoch > 0 && c.groups[h.Group] == nil && c.cgroups[h.Group] == nil {
			return ShareHeartbeatResult{}, fmt.Errorf("%w: %s is not a member of group %s", ErrUnknownMember, h.MemberID, h.Group)
		}
		return ShareHeartbeatResult{}, err
	}
	if h.MemberEpoch == epochLeave {
		if m := g.members[h.MemberID]; m != nil {
			c.removeShareMemberLocked(g, m)
			c.persistShareLocked(g)
		}
		return ShareHeartbeatResult{MemberEpoch: epochLeave}, nil
	}
	m := g.members[h.MemberID]
	switch {
	case h.MemberEpoch == epochJoin:
		if m == nil {
			m = &smember{id: h.MemberID}
			g.members[m.id] = m
			g.epoch++
		}
		m.sent = false // a (re)join gets its whole assignment
	case m == nil:
		return ShareHeartbeatResult{}, fmt.Errorf("%w: %s is not a member of group %s", ErrUnknownMember, h.MemberID, g.id)
	case h.MemberEpoch != m.epoch:
		return ShareHeartbeatResult{}, fmt.Errorf("%w: received %d, member is at %d", ErrFencedMemberEpoch, h.MemberEpoch, m.epoch)
	}
	if h.ClientID != "" {
		m.clientID, m.clientHost = h.ClientID, h.ClientHost
	}
	if h.RackID != nil {
		m.rackID = *h.RackID
	}
	if h.SubscribedTopicNames != nil {
		names := slices.Compact(slices.Sorted(slices.Values(h.SubscribedTopicNames)))
		if !slices.Equal(names, m.topicNames) {
			m.topicNames = names
			g.epoch++
		}
		m.sent = false // a heartbeat naming its topics gets its assignment
	}
	g.refreshTopicsLocked(topics)
	if g.epoch > g.assignmentEpoch {
		g.assignLocked(topics)
	}
	if m.epoch != g.assignmentEpoch {
		m.epoch = g.assignmentEpoch
	}
	now := c.opts.Now()
	session, interval := c.shareTimeouts(g.id)
	m.sessionDeadline = now.Add(session)
	c.armShareTimerLocked(g, m)
	res := ShareHeartbeatResult{MemberEpoch: m.epoch, HeartbeatInterval: interval}
	if !m.sent {
		res.Assignment = m.assigned.sorted()
		m.sent = true
	}
	c.persistShareLocked(g)
	return res, nil
}

// shareTimeouts are a share group's session timeout and heartbeat
// interval: its own where its config sets them, else the coordinator's.
func (c *Coordinator) shareTimeouts(group string) (session, heartbeat time.Duration) {
	return ownTimeouts(group, c.opts.ShareSessionTimeout, c.opts.ShareHeartbeatInterval, c.opts.ShareTimeouts)
}

// refreshTopicsLocked bumps the group epoch when a subscribed topic
// appears, disappears or grows.
func (g *shareGroup) refreshTopicsLocked(topics Topics) {
	v := topics.Version()
	if v == g.topicsVersion && g.topicsSig != "" {
		return
	}
	g.topicsVersion = v
	var sig strings.Builder
	for _, t := range g.subscribedTopics(topics) {
		fmt.Fprintf(&sig, "%x:%d;", t.ID, t.Partitions)
	}
	s := "v1|" + sig.String()
	if s != g.topicsSig {
		if g.topicsSig != "" {
			g.epoch++
		}
		g.topicsSig = s
	}
}

// subscribedTopics are the existing topics any member subscribes to, by
// name.
func (g *shareGroup) subscribedTopics(topics Topics) []TopicMeta {
	seen := map[string]bool{}
	var out []TopicMeta
	for _, m := range g.members {
		for _, n := range m.topicNames {
			if seen[n] {
				continue
			}
			seen[n] = true
			if t, ok := topics.ByName(n); ok {
				out = append(out, t)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// assignLocked computes the assignment of the group's epoch (the simple
// assignor): per topic, with no more subscribers than partitions each
// partition goes to one of them in turn; with more, each subscriber gets
// one partition in turn, so every partition has a member and the members
// spread evenly. The turn starts at a place given by the topic's name, so
// single-partition topics spread over the members too.
func (g *shareGroup) assignLocked(topics Topics) {
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range g.members {
			if !yield(id) {
				return
			}
		}
	})
	next := make(map[string]Assignment, len(ids))
	for _, id := range ids {
		next[id] = Assignment{}
	}
	for _, t := range g.subscribedTopics(topics) {
		var subs []string
		for _, id := range ids {
			if _, ok := slices.BinarySearch(g.members[id].topicNames, t.Name); ok {
				subs = append(subs, id)
			}
		}
		if len(subs) == 0 || t.Partitions <= 0 {
			continue
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(t.Name))
		start := int(h.Sum32() % uint32(len(subs)))
		n := int(t.Partitions)
		if len(subs) <= n {
			for p := range n {
				next[subs[(start+p)%len(subs)]].add(t.ID, int32(p))
			}
			continue
		}
		for i := range subs {
			next[subs[(start+i)%len(subs)]].add(t.ID, int32(i%n))
		}
	}
	for id, a := range next {
		m := g.members[id]
		if !sameAssignment(m.assigned, a) {
			m.assigned, m.sent = a, false
		}
	}
	g.assignmentEpoch = g.epoch
}

// sameAssignment reports whether two assignments hold the same partitions.
func sameAssignment(a, b Assignment) bool {
	x, y := a.sorted(), b.sorted()
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i].Topic != y[i].Topic || !slices.Equal(x[i].Partitions, y[i].Partitions) {
			return false
		}
	}
	return true
}

// removeShareMemberLocked drops a member; the others get its partitions at
// their next heartbeat.
func (c *Coordinator) removeShareMemberLocked(g *shareGroup, m *smember) {
	if m.timer != nil {
		m.timer.Stop()
	}
	delete(g.members, m.id)
	g.epoch++
}

// armShareTimerLocked (re)schedules the check that ends a member's session.
func (c *Coordinator) armShareTimerLocked(g *shareGroup, m *smember) {
	wait := m.sessionDeadline.Sub(c.opts.Now())
	if m.timer != nil {
		m.timer.Reset(wait)
		return
	}
	m.timer = time.AfterFunc(wait, func() { c.checkShareMember(g, m) })
}

// checkShareMember removes a member whose session ended.
func (c *Coordinator) checkShareMember(g *shareGroup, m *smember) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.sgroups[g.id] != g || g.members[m.id] != m {
		return
	}
	if c.opts.Now().Before(m.sessionDeadline) {
		c.armShareTimerLocked(g, m)
		return
	}
	c.log.Info("share group member session expired", "group", g.id, "member", m.id)
	c.removeShareMemberLocked(g, m)
	c.persistShareLocked(g)
}

// persistShareLocked notes the share group's image.
func (c *Coordinator) persistShareLocked(g *shareGroup) { c.noteImage(g.id, g.image(), false) }

// stateLocked is the share group's state.
func (g *shareGroup) stateLocked() State {
	if len(g.members) == 0 {
		return ShareEmpty
	}
	return ShareStable
}

// ShareMember describes one member of a share group.
type ShareMember struct {
	MemberID, RackID, ClientID, ClientHost string
	MemberEpoch                            int32
	SubscribedTopicNames                   []string
	Assignment                             []TopicPartitions
}

// ShareDescription describes a share group (ShareGroupDescribe).
type ShareDescription struct {
	Group           string
	State           State
	Epoch           int32
	AssignmentEpoch int32
	Assignor        string
	Members         []ShareMember
}

// DescribeShareGroup describes a share group; other or unknown groups are
// ErrGroupNotFound.
func (c *Coordinator) DescribeShareGroup(id string) (ShareDescription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, err := c.shareGroupLocked(id, false)
	if err != nil {
		return ShareDescription{}, err
	}
	d := ShareDescription{Group: id, State: g.stateLocked(), Epoch: g.epoch, AssignmentEpoch: g.assignmentEpoch, Assignor: AssignorSimple}
	for _, m := range g.members {
		d.Members = append(d.Members, ShareMember{MemberID: m.id, RackID: m.rackID, ClientID: m.clientID, ClientHost: m.clientHost,
			MemberEpoch: m.epoch, SubscribedTopicNames: m.topicNames, Assignment: m.assigned.sorted()})
	}
	sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].MemberID < d.Members[j].MemberID })
	return d, nil
}

// IsShareGroup reports whether id is a share group, and whether it has
// members.
func (c *Coordinator) IsShareGroup(id string) (share, active bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.sgroups[id]
	return g != nil, g != nil && len(g.members) > 0
}

// EnsureShareGroup makes id a share group if no group has that id (an
// admin setting a new share group's offsets); ErrGroupNotFound when it is
// another kind of group.
func (c *Coordinator) EnsureShareGroup(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, err := c.shareGroupLocked(id, true)
	if err == nil {
		c.persistShareLocked(g)
	}
	return err
}

// describeShareBrief answers the classic DescribeGroups for a share group:
// Dead with nothing else, as for consumer groups.
func (c *Coordinator) describeShareBrief(id string) (Description, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sgroups[id]; !ok {
		return Description{}, false
	}
	return Description{Type: "share", Group: id, State: Dead}, true
}

// listShareGroups lists the share groups.
func (c *Coordinator) listShareGroups() []Description {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Description, 0, len(c.sgroups))
	for id, g := range c.sgroups {
		out = append(out, Description{Type: "share", Group: id, State: g.stateLocked(), ProtocolType: "share"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}
