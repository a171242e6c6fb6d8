package replication

import (
	"context"
	"fmt"
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/rosettamq/rosetta/internal/model"
)

// Membership changes. A group's members change one at a time, by Raft
// configuration changes proposed by its leader: a new member joins as a
// learner (it receives the log, or a snapshot, and does not vote), is
// promoted to voter once it holds everything committed, and a member
// leaves by removal (a leader leaving hands its leadership off first).
// The records the leader wrote before the change are proposed before it;
// appends are held while it is stored and resume in the same term, so
// appends waiting for their commit are not failed.

// Membership is a group's configuration.
type Membership struct {
	Voters   []model.NodeID `json:"voters"`
	Learners []model.NodeID `json:"learners,omitempty"`
}

// Has reports whether node is a voter or a learner.
func (m Membership) Has(node model.NodeID) bool {
	return slices.Contains(m.Voters, node) || slices.Contains(m.Learners, node)
}

func membershipOf(cs *pb.ConfState) Membership {
	m := Membership{}
	for _, v := range cs.Voters {
		m.Voters = append(m.Voters, model.NodeID(v))
	}
	for _, l := range cs.Learners {
		m.Learners = append(m.Learners, model.NodeID(l))
	}
	slices.Sort(m.Voters)
	slices.Sort(m.Learners)
	return m
}

// membershipOfConfig is the membership of a Raft configuration (not
// joint: changes are made one at a time).
func membershipOfConfig(c tracker.Config) Membership {
	var m Membership
	for id := range c.Voters[0] {
		m.Voters = append(m.Voters, model.NodeID(id))
	}
	for id := range c.Learners {
		m.Learners = append(m.Learners, model.NodeID(id))
	}
	slices.Sort(m.Voters)
	slices.Sort(m.Learners)
	return m
}

func nodeIDs(ids []model.NodeID) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out
}

// MembershipStep is what Reconcile did.
type MembershipStep struct {
	Kind string // "add-learner", "promote", "remove", "hand-off", or "" (nothing to do, or waiting)
	Node model.NodeID
}

// Reconcile moves the group one step towards having exactly the members
// in want (as voters): it adds a missing member as a learner, promotes a
// learner that holds everything committed, or removes a member not
// wanted (handing leadership to a wanted voter first when this leader is
// the one leaving; a voter only once no wanted member is a learner still). Only the leader acts, one change at a time; call it
// periodically. It never removes the last wanted voter.
func (g *Group) Reconcile(ctx context.Context, want []model.NodeID) (MembershipStep, error) {
	if len(want) == 0 {
		return MembershipStep{}, fmt.Errorf("%w: a group needs members", model.ErrInvalidConfig)
	}
	done := make(chan membershipPlan, 1)
	if !g.call(func() { done <- g.planMembership(want) }) {
		return MembershipStep{}, fmt.Errorf("%w: replica busy", model.ErrClosed)
	}
	var p membershipPlan
	select {
	case p = <-done:
	case <-ctx.Done():
		return MembershipStep{}, ctx.Err()
	}
	if p.err != nil || p.step.Kind != "hand-off" {
		return p.step, p.err
	}
	return p.step, g.TransferLeadership(ctx, p.to)
}

// membershipPlan is the step planMembership took.
type membershipPlan struct {
	step MembershipStep
	cc   *pb.ConfChangeV2
	to   model.NodeID // the hand-off's target
	err  error
}

// planMembership picks and proposes the next step (Raft goroutine).
func (g *Group) planMembership(want []model.NodeID) (p membershipPlan) {
	if !g.leading || !(g.open || g.held) {
		p.err = fmt.Errorf("%w: group %d", model.ErrNotLeader, g.cfg.Group)
		return
	}
	st := g.rn.Status()
	if g.held || g.confIndex > st.Applied {
		return // the last change is not applied yet
	}
	cur := membershipOfConfig(st.Config)
	caughtUp := func(id model.NodeID) bool {
		pr, ok := st.Progress[uint64(id)]
		return ok && pr.Match >= st.GetCommit()
	}
	var cc pb.ConfChangeSingle
	switch {
	case firstMissing(want, cur) != 0:
		id := firstMissing(want, cur)
		cc, p.step = pb.ConfChangeSingle{Type: pb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(id))}, MembershipStep{"add-learner", id}
	case firstReady(want, cur.Learners, caughtUp) != 0:
		id := firstReady(want, cur.Learners, caughtUp)
		cc, p.step = pb.ConfChangeSingle{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(uint64(id))}, MembershipStep{"promote", id}
	default:
		id := firstUnwanted(want, cur)
		if id == 0 {
			return
		}
		if id == g.cfg.Node {
			for _, v := range cur.Voters {
				if v != id && slices.Contains(want, v) && caughtUp(v) {
					p.step, p.to = MembershipStep{"hand-off", v}, v
					return
				}
			}
			return // no voter to hand off to yet
		}
		if slices.Contains(cur.Voters, id) && len(cur.Voters) == 1 {
			return
		}
		if slices.Contains(cur.Voters, id) && slices.ContainsFunc(cur.Learners, func(l model.NodeID) bool { return slices.Contains(want, l) }) {
			// A voter moving to another member leaves once its
			// replacement votes: the group keeps its copies throughout.
			return
		}
		cc, p.step = pb.ConfChangeSingle{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(id))}, MembershipStep{"remove", id}
	}
	p.cc = &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{&cc}}
	if err := g.proposeConfChange(p.cc); err != nil {
		p.err, p.step = err, MembershipStep{}
	}
	return
}

// proposeConfChange proposes a membership change after the records
// written so far, holding appends until it is stored (Raft goroutine).
func (g *Group) proposeConfChange(cc *pb.ConfChangeV2) error {
	g.holdAppends()
	index := g.raftLast + 1 // Raft's log ends where the records proposed end
	err := g.rn.ProposeConfChange(cc)
	// Whatever happened, appends resume once Raft's log is stored.
	g.work.push(storeWork{openTerm: g.term})
	if err != nil {
		return fmt.Errorf("propose membership change: %w", err)
	}
	g.confIndex = index
	g.log.Info("membership change proposed", "change", cc.Changes[0].GetType().String(), "node", cc.Changes[0].GetNodeId(), "index", g.confIndex)
	return nil
}

// holdAppends stops appends without ending the term, after proposing
// what was written: appends wait, and openEngine resumes them in the same
// term (Raft goroutine).
func (g *Group) holdAppends() {
	if g.open {
		g.engine.HoldAppends()
		g.propose() // what was written before the hold
		g.open, g.held = false, true
		g.holding.Store(true) // before writable: Leads stays true throughout
		g.writable.Store(false)
		g.signalRoles()
	}
}

// firstMissing is the first wanted node that is neither voter nor learner.
func firstMissing(want []model.NodeID, cur Membership) model.NodeID {
	for _, id := range want {
		if !cur.Has(id) {
			return id
		}
	}
	return 0
}

// firstReady is the first wanted learner that holds everything committed.
func firstReady(want, learners []model.NodeID, caughtUp func(model.NodeID) bool) model.NodeID {
	for _, id := range learners {
		if slices.Contains(want, id) && caughtUp(id) {
			return id
		}
	}
	return 0
}

// firstUnwanted is the first member not wanted: learners before voters.
func firstUnwanted(want []model.NodeID, cur Membership) model.NodeID {
	for _, l := range [][]model.NodeID{cur.Learners, cur.Voters} {
		for _, id := range l {
			if !slices.Contains(want, id) {
				return id
			}
		}
	}
	return 0
}

// publishStatusSoon refreshes Status now instead of at the next refresh.
func (g *Group) publishStatusSoon() { g.call(g.publishStatus) }

// Membership returns the group's membership as this replica applied it
// now (the last published status if the replica is busy).
func (g *Group) Membership(ctx context.Context) Membership {
	ch := make(chan Membership, 1)
	if g.call(func() { ch <- membershipOfConfig(g.rn.Status().Config) }) {
		select {
		case m := <-ch:
			return m
		case <-ctx.Done():
		}
	}
	st := g.Status()
	return Membership{Voters: st.Voters, Learners: st.Learners}
}
