package member

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// membershipInterval is how often a group's leader checks its members
// against the cluster's and members check the recorded list.
const membershipInterval = 500 * time.Millisecond

// tendInterval is how often a group's leader looks after its group.
const tendInterval = 50 * time.Millisecond

// balanceInterval is how often a leader checks whether its group's
// preferred member should lead it instead.
const balanceInterval = 2 * time.Second

// handOffWait bounds a hand-off to the preferred member: appends stop
// while it is under way, so one the member cannot complete at once (still
// catching up after a restart or a partition) is given up soon and tried
// again later (balanceBackoff).
const handOffWait = 2 * time.Second

// balanceBackoff is the longest wait between hand-offs to a preferred
// member that failed (doubling from balanceInterval).
const balanceBackoff = 16 * time.Second

// tendGroup does a group leader's housekeeping until ctx ends: it
// publishes itself as the group's leader, hands the group off when its
// disk guard refuses writes, keeps the group's membership as the
// cluster's and hands the group to its preferred member.
func (m *Member) tendGroup(ctx context.Context, gr *Group, r *Replica) {
	var stepDownAt, balanceAt, membersAt, publishAt time.Time
	balanceWait := balanceInterval
	var published string            // the group membership last published
	var publishedTerm model.Term    // the term this member last published itself the leader of
	var publishedISR []model.NodeID // the in-sync voters it published with it
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(tendInterval):
		}
		if !r.Raft.Writable() {
			continue
		}
		now := m.clock.Now()
		_, tm := r.Raft.Leader()
		isr := r.Raft.Status().InSync()
		if len(isr) == 0 && tm == publishedTerm {
			isr = publishedISR // the status is older than the term: no news
		}
		if (tm != publishedTerm || !slices.Equal(isr, publishedISR)) && now.After(publishAt) {
			if err := m.dir.PublishLeader(ctx, gr.id, tm, isr); err != nil {
				m.log.Info("publishing the group's leader failed", "group", gr.id, "err", err)
				publishAt = now.Add(membershipInterval) // etcd out of reach: not on every tick
			} else {
				if tm == publishedTerm {
					m.log.Info("in-sync replicas", "group", gr.id, "isr", isr)
				}
				publishedTerm, publishedISR = tm, isr
			}
		}
		if r.Engine.DiskFull() && now.After(stepDownAt) && !r.Engine.TierBehind() && !r.Engine.TierFreeable() {
			// A leader whose disk guard refuses writes would stall the
			// group: a follower with room takes over. Not while segments
			// wait for the tiered-storage bucket (every replica holds
			// them alike, and a new leader would upload them again), nor
			// while tiered segments are still local (the guard deletes
			// them at its next check, as when the store has just come
			// back and caught up).
			m.log.Warn("disk guard refuses writes: handing leadership off", "group", gr.id)
			m.handOffGroup(gr, r)
			stepDownAt = m.clock.Now().Add(10 * time.Second)
			continue
		}
		if now.After(membersAt) {
			membersAt = now.Add(membershipInterval)
			m.reconcileMembers(ctx, gr, r, &published)
		}
		if m.clock.Now().After(balanceAt) {
			if m.balance(ctx, gr, r) {
				balanceWait = min(2*balanceWait, balanceBackoff)
			} else {
				balanceWait = balanceInterval
			}
			balanceAt = m.clock.Now().Add(balanceWait)
		}
	}
}

// reconcileMembers, on a group's leader, moves the group one step towards
// having its placement as voters, and publishes the group's membership
// when it changed (published: what was published last).
func (m *Member) reconcileMembers(ctx context.Context, gr *Group, r *Replica, published *string) {
	want := placement.Sorted(m.Placed(gr.id))
	st := r.Raft.Status()
	if st.Leader != m.cfg.Self || len(st.Voters) == 0 {
		return
	}
	gm := replication.Membership{Voters: st.Voters, Learners: st.Learners}
	b, _ := json.Marshal(gm)
	if string(b) != *published {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := m.dir.PublishMembership(pctx, gr.id, gm)
		cancel()
		if err != nil {
			m.log.Warn("publishing the group's membership failed", "group", gr.id, "err", err)
		} else {
			*published = string(b)
		}
	}
	if slices.Equal(st.Voters, want) && len(st.Learners) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	step, err := r.Raft.Reconcile(rctx, want)
	switch {
	case err != nil:
		m.log.Info("group membership", "group", gr.id, "err", err)
	case step.Kind != "":
		m.log.Info("group membership", "group", gr.id, "step", step.Kind, "node", step.Node)
	}
}

// balance hands the group's leadership to its preferred member once that
// member is registered (not stopping) and holds everything the group
// committed (with several groups; one group stays where elections put
// it). It reports whether a hand-off was tried and failed.
func (m *Member) balance(ctx context.Context, gr *Group, r *Replica) (failed bool) {
	if len(m.Groups()) == 1 {
		return false
	}
	want := placement.PreferredLeader(m.Members(), gr.id)
	st := r.Raft.Status()
	if want == m.cfg.Self || st.Leader != m.cfg.Self || !st.Writable {
		return false
	}
	caughtUp := false
	for _, p := range st.Replicas {
		if p.Node == want && p.State == "replicate" && p.Match >= st.Commit {
			caughtUp = true
		}
	}
	if !caughtUp {
		return false
	}
	nctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	nodes, err := cluster.Nodes(nctx, m.store)
	cancel()
	live := false
	for _, n := range nodes {
		live = live || n.ID == want
	}
	if err != nil || !live {
		return false
	}
	tctx, cancel := context.WithTimeout(ctx, handOffWait)
	defer cancel()
	start := m.clock.Now()
	if err := r.Raft.TransferLeadership(tctx, want); err != nil {
		m.log.Info("moving leadership to the preferred member failed; trying again later", "group", gr.id, "to", want,
			"err", err, "took", m.clock.Now().Sub(start).Round(time.Millisecond))
		return true
	}
	m.log.Info("leadership moved to the group's preferred member", "group", gr.id, "to", want,
		"took", m.clock.Now().Sub(start).Round(time.Millisecond))
	return false
}

// HandOff moves the leadership of every group this member leads to a
// caught-up replica before it stops, so clients fail over within a round
// trip rather than an election timeout. The embedded etcd's leadership
// moves first: the groups' new leaders build their brokers with etcd
// calls, which an etcd leader change under way would hold for etcd's
// request timeout.
func (m *Member) HandOff() {
	if m.etcd != nil {
		if err := m.etcd.HandOffLeadership(); err != nil {
			m.log.Warn("etcd leadership hand-off", "err", err)
		}
	}
	var wg sync.WaitGroup
	for _, gr := range m.Groups() {
		r := gr.Hosted()
		if r == nil {
			continue
		}
		wg.Go(func() { m.handOffGroup(gr, r) })
	}
	wg.Wait()
}

// handOffGroup moves one group's leadership to its most caught-up replica
// if this member leads it: one Raft is replicating to (a replica it only
// probes may be cut off or down, and a hand-off to it would hold the
// group's appends until it is given up).
func (m *Member) handOffGroup(gr *Group, r *Replica) {
	st := r.Raft.Status()
	if st.Leader != m.cfg.Self {
		return
	}
	var to model.NodeID
	best := uint64(0)
	for _, p := range st.Replicas {
		if p.Node != m.cfg.Self && !p.Learner && p.State == "replicate" && p.Match >= best {
			to, best = p.Node, p.Match
		}
	}
	if to == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.Raft.TransferLeadership(ctx, to); err != nil {
		m.log.Warn("leadership hand-off", "group", gr.id, "to", to, "err", err)
		return
	}
	m.log.Info("handed leadership off", "group", gr.id, "to", to)
}

// Elect moves group g's leadership to member node (Kafka's preferred
// leader election): the group's leader hands it off, here or over the
// transport.
func (m *Member) Elect(ctx context.Context, g int, node model.NodeID) error {
	if _, ok := m.Members()[node]; !ok {
		return errNoSuch("member", int(node))
	}
	if m.group(model.GroupID(g)) == nil {
		return errNoSuch("group", g)
	}
	_, err := callGroupElect(ctx, m, g, node)
	return err
}
