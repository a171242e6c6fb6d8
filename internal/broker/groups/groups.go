// Package groups is the classic consumer-group coordinator (Kafka's
// JoinGroup/SyncGroup/Heartbeat/LeaveGroup protocol, KIP-345 static
// membership). It is protocol-neutral: member metadata and assignments are
// opaque bytes, assignment happens in the client, and errors are sentinels
// that the front-end maps to its codes. Committed offsets live in the broker's
// offset store; this package only validates generations for commits.
package groups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by the coordinator.
var (
	ErrUnknownMember         = errors.New("unknown member id")
	ErrIllegalGeneration     = errors.New("illegal generation")
	ErrRebalanceInProgress   = errors.New("rebalance in progress")
	ErrInconsistentProtocol  = errors.New("inconsistent group protocol")
	ErrInvalidSessionTimeout = errors.New("invalid session timeout")
	ErrGroupNotEmpty         = errors.New("group not empty")
	ErrGroupNotFound         = errors.New("group not found")
	ErrFencedInstance        = errors.New("fenced instance id")
	ErrInvalidGroupID        = errors.New("invalid group id")
)

// State is a group's state.
type State string

// Group states.
const (
	Empty               State = "Empty"
	PreparingRebalance  State = "PreparingRebalance"
	CompletingRebalance State = "CompletingRebalance"
	Stable              State = "Stable"
	Dead                State = "Dead"
)

// Protocol is one assignment protocol a member supports, with its metadata.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinRequest asks to join (or rejoin) a group.
type JoinRequest struct {
	Group            string
	MemberID         string // empty for a new member
	InstanceID       string // static membership (KIP-345); empty if none
	ClientID         string
	ClientHost       string
	ProtocolType     string
	Protocols        []Protocol
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
}

// MemberInfo describes a member to the group leader.
type MemberInfo struct {
	MemberID   string
	InstanceID string
	Metadata   []byte
}

// JoinResult is the answer to a join once the rebalance completes.
type JoinResult struct {
	Generation int32
	Protocol   string
	Leader     string
	MemberID   string
	Members    []MemberInfo // only for the leader
}

// Options configure the coordinator.
type Options struct {
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// InitialRebalanceDelay lets more members join an empty group before
	// its first generation (Kafka's group.initial.rebalance.delay.ms).
	InitialRebalanceDelay time.Duration
	// ConsumerSessionTimeout and ConsumerHeartbeatInterval apply to
	// consumer-protocol (KIP-848) groups, where the broker sets them
	// (Kafka's group.consumer.session.timeout.ms, default 45 s, and
	// group.consumer.heartbeat.interval.ms, default 5 s).
	ConsumerSessionTimeout    time.Duration
	ConsumerHeartbeatInterval time.Duration
	// ConsumerTimeouts are a group's own session timeout and heartbeat
	// interval (its group config: consumer.session.timeout.ms and
	// consumer.heartbeat.interval.ms), zero where it has none.
	ConsumerTimeouts func(group string) (session, heartbeat time.Duration)
	// ShareSessionTimeout and ShareHeartbeatInterval apply to share groups
	// (Kafka's group.share.session.timeout.ms, default 45 s, and
	// group.share.heartbeat.interval.ms, default 5 s); ShareTimeouts are
	// a group's own (share.session.timeout.ms, share.heartbeat.interval.ms),
	// zero where it has none.
	ShareSessionTimeout    time.Duration
	ShareHeartbeatInterval time.Duration
	ShareTimeouts          func(group string) (session, heartbeat time.Duration)
	// Persist stores a group's image (nil: the group is gone), so that
	// the next coordinator restores it (Restore). The coordinator calls it
	// from one goroutine of its own with each group's latest image once it
	// changed. Nil: nothing is persisted.
	Persist func(ctx context.Context, group string, image []byte) error
	Logger  *slog.Logger
	Now     func() time.Time
}

// Coordinator holds every group.
type Coordinator struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	groups  map[string]*group         // classic groups
	cgroups map[string]*consumerGroup // consumer-protocol groups; an id is in one map at most
	sgroups map[string]*shareGroup    // share groups
	nextID  atomic.Uint64
	closed  bool
	persist persister
}

// New returns a coordinator.
func New(opts Options) *Coordinator {
	if opts.MinSessionTimeout <= 0 {
		opts.MinSessionTimeout = 6 * time.Second
	}
	if opts.MaxSessionTimeout <= 0 {
		opts.MaxSessionTimeout = 30 * time.Minute
	}
	if opts.ConsumerSessionTimeout <= 0 {
		opts.ConsumerSessionTimeout = 45 * time.Second
	}
	if opts.ConsumerHeartbeatInterval <= 0 {
		opts.ConsumerHeartbeatInterval = 5 * time.Second
	}
	if opts.ShareSessionTimeout <= 0 {
		opts.ShareSessionTimeout = 45 * time.Second
	}
	if opts.ShareHeartbeatInterval <= 0 {
		opts.ShareHeartbeatInterval = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Coordinator{opts: opts, log: opts.Logger.With("component", "groups"), groups: map[string]*group{},
		cgroups: map[string]*consumerGroup{}, sgroups: map[string]*shareGroup{}}
	c.startPersist()
	return c
}

type member struct {
	id, instanceID, clientID, clientHost string
	protocols                            []Protocol
	sessionTimeout, rebalanceTimeout     time.Duration
	assignment                           []byte
	joinCh                               chan joinOutcome // set while a join waits
	syncCh                               chan syncOutcome // set while a sync waits
	lastSeen                             time.Time
	sessionTimer                         *time.Timer
}

type joinOutcome struct {
	res JoinResult
	err error
}

type syncOutcome struct {
	assignment []byte
	err        error
}

type group struct {
	c  *Coordinator
	id string

	mu           sync.Mutex
	state        State
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*member
	instances    map[string]string // instance id → member id
	rebalance    *time.Timer
}

func (c *Coordinator) group(id string, create bool) *group {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[id]
	if g == nil && create {
		if c.sgroups[id] != nil {
			return nil // a share group
		}
		if cg := c.cgroups[id]; cg != nil {
			if len(cg.members) > 0 {
				return nil // a consumer group: not joinable as classic
			}
			delete(c.cgroups, id) // an empty consumer group converts
			c.noteImage(id, nil, true)
		}
		g = &group{c: c, id: id, state: Empty, members: map[string]*member{}, instances: map[string]string{}}
		c.groups[id] = g
	}
	return g
}

// newMemberID makes a member id; it takes no lock, since it runs under a
// group's lock (lock order: Coordinator.mu before group.mu).
func (c *Coordinator) newMemberID(clientID string) string {
	n := c.nextID.Add(1)
	if clientID == "" {
		clientID = "member"
	}
	return fmt.Sprintf("%s-%d-%d", clientID, c.opts.Now().UnixNano(), n)
}

// Join adds or refreshes a member and waits for the rebalance it takes part
// in to complete, or for ctx to end.
func (c *Coordinator) Join(ctx context.Context, req JoinRequest) (JoinResult, error) {
	if req.Group == "" {
		return JoinResult{}, ErrInvalidGroupID
	}
	if req.SessionTimeout < c.opts.MinSessionTimeout || req.SessionTimeout > c.opts.MaxSessionTimeout {
		return JoinResult{}, ErrInvalidSessionTimeout
	}
	if req.RebalanceTimeout <= 0 {
		req.RebalanceTimeout = req.SessionTimeout
	}
	g := c.group(req.Group, true)
	if g == nil {
		return JoinResult{}, fmt.Errorf("%w: group %s is not a classic group", ErrGroupNotFound, req.Group)
	}
	g.mu.Lock()
	if g.state == Dead {
		g.mu.Unlock()
		return JoinResult{}, ErrUnknownMember
	}
	if g.state != Empty && g.protocolType != req.ProtocolType {
		g.mu.Unlock()
		return JoinResult{}, ErrInconsistentProtocol
	}
	if len(g.members) > 0 && !g.supportsAny(req.Protocols) {
		g.mu.Unlock()
		return JoinResult{}, ErrInconsistentProtocol
	}
	m, err := g.memberForJoin(req)
	if err != nil {
		g.mu.Unlock()
		return JoinResult{}, err
	}
	changed := !sameProtocols(m.protocols, req.Protocols)
	m.protocols = req.Protocols
	m.sessionTimeout, m.rebalanceTimeout = req.SessionTimeout, req.RebalanceTimeout
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
	g.protocolType = req.ProtocolType
	g.touchLocked(m)

	// A follower rejoining a stable group with unchanged metadata gets the
	// current generation back without a rebalance.
	if g.state == Stable && !changed && m.id != g.leader && m.assignment != nil {
		res := JoinResult{Generation: g.generation, Protocol: g.protocol, Leader: g.leader, MemberID: m.id}
		g.mu.Unlock()
		return res, nil
	}
	ch := make(chan joinOutcome, 1)
	if m.joinCh != nil {
		m.joinCh <- joinOutcome{err: ErrRebalanceInProgress} // a superseded join
	}
	m.joinCh = ch
	g.prepareRebalanceLocked()
	g.maybeCompleteJoinLocked()
	g.mu.Unlock()

	select {
	case out := <-ch:
		return out.res, out.err
	case <-ctx.Done():
		g.mu.Lock()
		if m.joinCh == ch {
			m.joinCh = nil
		}
		g.mu.Unlock()
		return JoinResult{}, ctx.Err()
	}
}

// memberForJoin finds or creates the member a join refers to.
func (g *group) memberForJoin(req JoinRequest) (*member, error) {
	if req.InstanceID != "" {
		if old, ok := g.instances[req.InstanceID]; ok {
			m := g.members[old]
			if req.MemberID != "" && req.MemberID != old {
				return nil, ErrFencedInstance
			}
			return m, nil
		}
	}
	if req.MemberID != "" {
		m, ok := g.members[req.MemberID]
		if !ok {
			return nil, ErrUnknownMember
		}
		return m, nil
	}
	m := &member{id: g.c.newMemberID(req.ClientID), instanceID: req.InstanceID}
	g.members[m.id] = m
	if req.InstanceID != "" {
		g.instances[req.InstanceID] = m.id
	}
	return m, nil
}

func (g *group) supportsAny(ps []Protocol) bool {
	for _, p := range ps {
		if g.allSupport(p.Name) {
			return true
		}
	}
	return false
}

func (g *group) allSupport(name string) bool {
	for _, m := range g.members {
		ok := false
		for _, p := range m.protocols {
			if p.Name == name {
				ok = true
				break
			}
		}
		if !ok && len(m.protocols) > 0 {
			return false
		}
	}
	return true
}

func sameProtocols(a, b []Protocol) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || string(a[i].Metadata) != string(b[i].Metadata) {
			return false
		}
	}
	return true
}

// prepareRebalanceLocked moves the group to PreparingRebalance and arms the
// rebalance timeout.
func (g *group) prepareRebalanceLocked() {
	if g.state == PreparingRebalance {
		return
	}
	// Members waiting in SyncGroup must rejoin.
	for _, m := range g.members {
		if m.syncCh != nil {
			m.syncCh <- syncOutcome{err: ErrRebalanceInProgress}
			m.syncCh = nil
		}
	}
	wasEmpty := g.state == Empty
	g.state = PreparingRebalance
	timeout := time.Duration(0)
	for _, m := range g.members {
		timeout = max(timeout, m.rebalanceTimeout)
	}
	if wasEmpty && g.c.opts.InitialRebalanceDelay > 0 {
		timeout = min(timeout, g.c.opts.InitialRebalanceDelay)
	}
	if g.rebalance != nil {
		g.rebalance.Stop()
	}
	g.rebalance = time.AfterFunc(timeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.state == PreparingRebalance {
			g.completeJoinLocked()
		}
	})
}

// maybeCompleteJoinLocked completes the join phase once every known member
// has rejoined.
func (g *group) maybeCompleteJoinLocked() {
	if g.state != PreparingRebalance {
		return
	}
	if g.c.opts.InitialRebalanceDelay > 0 && g.generation == 0 {
		return // wait for the delay to let more members arrive
	}
	for _, m := range g.members {
		if m.joinCh == nil {
			return
		}
	}
	g.completeJoinLocked()
}

// completeJoinLocked drops members that did not rejoin, starts a new
// generation and answers every waiting join.
func (g *group) completeJoinLocked() {
	if g.rebalance != nil {
		g.rebalance.Stop()
		g.rebalance = nil
	}
	for id, m := range g.members {
		if m.joinCh == nil {
			g.removeLocked(id)
		}
	}
	if len(g.members) == 0 {
		g.state = Empty
		g.generation++
		g.protocol, g.leader = "", ""
		g.persistLocked()
		return
	}
	g.generation++
	g.protocol = g.chooseProtocolLocked()
	if _, ok := g.members[g.leader]; !ok {
		ids := make([]string, 0, len(g.members))
		for id := range g.members {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		g.leader = ids[0]
	}
	g.state = CompletingRebalance
	var infos []MemberInfo
	for _, m := range g.members {
		infos = append(infos, MemberInfo{MemberID: m.id, InstanceID: m.instanceID, Metadata: m.metadataFor(g.protocol)})
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].MemberID < infos[j].MemberID })
	for _, m := range g.members {
		m.assignment = nil
		res := JoinResult{Generation: g.generation, Protocol: g.protocol, Leader: g.leader, MemberID: m.id}
		if m.id == g.leader {
			res.Members = infos
		}
		m.joinCh <- joinOutcome{res: res}
		m.joinCh = nil
		g.touchLocked(m)
	}
	g.c.log.Info("group rebalanced", "group", g.id, "generation", g.generation, "members", len(g.members), "protocol", g.protocol)
}

// chooseProtocolLocked picks the protocol every member supports that most
// members list first (Kafka's vote).
func (g *group) chooseProtocolLocked() string {
	votes := map[string]int{}
	var candidates []string
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.allSupport(p.Name) {
				if _, seen := votes[p.Name]; !seen {
					candidates = append(candidates, p.Name)
				}
				votes[p.Name]++
				break
			}
		}
	}
	sort.Strings(candidates)
	best := ""
	for _, c := range candidates {
		if best == "" || votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

func (m *member) metadataFor(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// touchLocked records activity and re-arms the member's session timer.
func (g *group) touchLocked(m *member) {
	m.lastSeen = g.c.opts.Now()
	if m.sessionTimer != nil {
		m.sessionTimer.Stop()
	}
	id := m.id
	m.sessionTimer = time.AfterFunc(m.sessionTimeout, func() { g.expire(id, m) })
}

// expire removes a member whose session ran out.
func (g *group) expire(id string, m *member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur, ok := g.members[id]
	if !ok || cur != m || m.joinCh != nil {
		return // gone, replaced, or waiting in a join (bounded by the rebalance timeout)
	}
	if g.c.opts.Now().Sub(m.lastSeen) < m.sessionTimeout {
		return
	}
	g.c.log.Info("member session expired", "group", g.id, "member", id)
	g.removeLocked(id)
	g.afterRemovalLocked()
}

func (g *group) removeLocked(id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	if m.sessionTimer != nil {
		m.sessionTimer.Stop()
	}
	if m.syncCh != nil {
		m.syncCh <- syncOutcome{err: ErrRebalanceInProgress}
		m.syncCh = nil
	}
	if m.instanceID != "" && g.instances[m.instanceID] == id {
		delete(g.instances, m.instanceID)
	}
	delete(g.members, id)
}

// afterRemovalLocked rebalances (or empties) the group after members left.
func (g *group) afterRemovalLocked() {
	if len(g.members) == 0 && g.state != PreparingRebalance {
		if g.rebalance != nil {
			g.rebalance.Stop()
		}
		g.state = Empty
		g.generation++
		g.protocol, g.leader = "", ""
		g.persistLocked()
		return
	}
	g.prepareRebalanceLocked()
	g.maybeCompleteJoinLocked()
}

// ConsumerDefaults are the session timeout and heartbeat interval of
// consumer-protocol groups whose config does not set their own.
func (c *Coordinator) ConsumerDefaults() (session, heartbeat time.Duration) {
	return c.opts.ConsumerSessionTimeout, c.opts.ConsumerHeartbeatInterval
}
