package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
)

// Which members host which groups. Group 0, which serves every listener
// and the node-wide state, has every member as a voter. On a cluster of
// up to cluster.replication_factor members (3 by default) so has every
// other group; on a larger one group g has that many voters, the members
// from its preferred leader on in id order (wrapping), so the copies
// spread evenly. A member
// hosts a replica of a group while it is one of the group's voters or
// learners or the placement names it: it starts one when the placement
// comes to name it (its leader then adds it as a learner and promotes it
// once caught up) and drops it, files and all, once the group's leader
// has removed it. Members that host no replica of a group know its leader
// from the metadata (leaderKey), where each leader publishes its term:
// they relay its connections there and name it to clients.

// defaultReplicationFactor is how many voters a group other than group 0
// has on a cluster of more members unless cluster.replication_factor says
// otherwise (Kafka's usual replication factor).
const defaultReplicationFactor = 3

// replicationFactorKey holds the cluster's replication factor.
const replicationFactorKey = "cluster/replication-factor"

// groupVoters is the placement of group g over members with factor
// copies: the voters it should have, its preferred leader first.
func groupVoters(members map[model.NodeID]string, g model.GroupID, factor int) []model.NodeID {
	ids := sortedIDs(members)
	n := len(ids)
	if factor <= 0 {
		factor = defaultReplicationFactor
	}
	if g != 0 && n > factor {
		n = factor
	}
	out := make([]model.NodeID, n)
	for i := range out {
		out[i] = ids[(int(g)+i)%len(ids)]
	}
	return out
}

// placed is group g's placement over the cluster's members now.
func (r *replica) placed(g model.GroupID) []model.NodeID {
	return groupVoters(r.members(), g, r.factor)
}

// resolveReplicationFactor settles the cluster's replication factor: as
// the cluster was made (recorded in the metadata by its first member, from
// cluster.replication_factor or the default; five — every member — for a
// cluster that ran before it was recorded); a member configured otherwise
// refuses to start (the groups' copies would move).
func (a *App) resolveReplicationFactor(ctx context.Context) error {
	want := a.cfg.Cluster.ReplicationFactor
	if want == 0 {
		want = defaultReplicationFactor
		// A cluster that ran before the factor was recorded had every
		// member in every group: it keeps them (up to five), rather than
		// losing copies as it starts on this version.
		if _, err := a.meta.Get(ctx, groupMembersKey(0)); err == nil {
			want = maxMembers
		} else if !errors.Is(err, meta.ErrNotFound) {
			return err
		}
	}
	_, err := a.meta.Txn(ctx, []meta.Compare{{Key: replicationFactorKey, Target: meta.CompareCreate}},
		[]meta.Op{{Key: replicationFactorKey, Value: []byte(strconv.Itoa(want))}})
	if err != nil && !errors.Is(err, meta.ErrConflict) {
		return err
	}
	kv, err := a.meta.Get(ctx, replicationFactorKey)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(string(kv.Value))
	if err != nil || n < 1 || n > maxMembers {
		return fmt.Errorf("%w: the cluster's recorded replication factor %q", model.ErrCorruptRecord, kv.Value)
	}
	if a.cfg.Cluster.ReplicationFactor != 0 && n != a.cfg.Cluster.ReplicationFactor {
		return fmt.Errorf("%w: cluster.replication_factor is %d but the cluster was made with %d (it cannot change)",
			model.ErrInvalidConfig, a.cfg.Cluster.ReplicationFactor, n)
	}
	a.replica.factor = n
	return nil
}

// placedSorted is a placement in id order.
func placedSorted(ids []model.NodeID) []model.NodeID {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// placedMap is group g's placement with each member's host.
func (r *replica) placedMap(g model.GroupID) map[model.NodeID]string {
	m := r.members()
	out := map[model.NodeID]string{}
	for _, id := range groupVoters(m, g, r.factor) {
		out[id] = m[id]
	}
	return out
}

// leaderPrefix is where the groups' leaders publish themselves.
const leaderPrefix = "cluster/group-leader/"

// leaderKey holds group g's leader as it published itself.
func leaderKey(g model.GroupID) string { return leaderPrefix + strconv.Itoa(int(g)) }

// leaderRecord is a group's leader as published under leaderKey.
type leaderRecord struct {
	Node model.NodeID `json:"node"`
	Term model.Term   `json:"term"`
}

// publishLeader records this member as group gr's leader in term tm,
// unless a later term is recorded.
func (a *App) publishLeader(ctx context.Context, gr *groupReplica, tm model.Term) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	b, _ := json.Marshal(leaderRecord{Node: a.replica.self, Term: tm})
	key := leaderKey(gr.id)
	kv, err := a.meta.Get(ctx, key)
	cmp := meta.Compare{Key: key, Target: meta.CompareCreate}
	switch {
	case errors.Is(err, meta.ErrNotFound):
	case err != nil:
		return err
	default:
		var cur leaderRecord
		if json.Unmarshal(kv.Value, &cur) == nil && cur.Term >= tm {
			return nil
		}
		cmp = meta.Compare{Key: key, Target: meta.CompareMod, Revision: kv.Revision}
	}
	_, err = a.meta.Txn(ctx, []meta.Compare{cmp}, []meta.Op{{Key: key, Value: b}})
	if errors.Is(err, meta.ErrConflict) {
		return nil // another leader published meanwhile; the next check looks again
	}
	return err
}

// watchLeaders follows the leaders the groups publish, for the groups
// this member hosts no replica of: a relayed connection whose group's
// leader changed follows it.
func (a *App) watchLeaders(ctx context.Context) {
	r := a.replica
	apply := func(kv meta.KV) {
		g, err := strconv.Atoi(strings.TrimPrefix(kv.Key, leaderPrefix))
		var rec leaderRecord
		if err != nil || g < 0 || g >= len(r.groups) || json.Unmarshal(kv.Value, &rec) != nil {
			return
		}
		gr := r.groups[g]
		if old := gr.published.Swap(&rec); old != nil && *old == rec {
			return
		}
		if gr.hosted() == nil {
			gr.relays.closeUpstreams()
		}
	}
	for ctx.Err() == nil {
		kvs, rev, err := a.meta.ListRev(ctx, leaderPrefix)
		if err != nil {
			sleepCtx(ctx, membershipInterval)
			continue
		}
		for _, kv := range kvs {
			apply(kv)
		}
		for ev := range a.meta.WatchFrom(ctx, leaderPrefix, rev) {
			if ev.Compacted {
				break
			}
			if !ev.Deleted {
				apply(ev.KV)
			}
		}
		sleepCtx(ctx, 100*time.Millisecond) // the watch ended: list again
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// publishedMembership is group g's membership as its leader published it
// (false while none is).
func (a *App) publishedMembership(ctx context.Context, g model.GroupID) (replication.Membership, bool, error) {
	var m replication.Membership
	kv, err := a.meta.Get(ctx, groupMembersKey(g))
	if errors.Is(err, meta.ErrNotFound) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return m, false, fmt.Errorf("%w: group %d's recorded membership: %w", model.ErrCorruptRecord, g, err)
	}
	return m, true, nil
}

// hostsAtStart says whether this member starts with a replica of group g:
// group 0 always; another when the placement names it, it ran one before
// (its Raft state is on disk) or the group's leader has it as a member.
func (a *App) hostsAtStart(ctx context.Context, g model.GroupID) (bool, error) {
	r := a.replica
	if g == 0 || slices.Contains(r.placed(g), r.self) {
		return true, nil
	}
	if _, err := os.Stat(filepath.Join(groupDir(a.cfg.DataDir, g), "raft", "state.json")); err == nil {
		return true, nil
	}
	m, ok, err := a.publishedMembership(ctx, g)
	return ok && m.Has(r.self), err
}

// startGroupReplica starts this member's Raft replica of group gr over
// its open engine lr.engine (waiting, for a replica new to the group,
// until the group's leader has added it) and makes it the member's.
func (a *App) startGroupReplica(ctx context.Context, gr *groupReplica, lr *localReplica) error {
	r := a.replica
	voters, learners, err := a.initialMembership(ctx, gr)
	if err != nil {
		return fmt.Errorf("group %d: %w", gr.id, err)
	}
	lr.raft, err = replication.Start(replication.Config{
		Group:     gr.id,
		Node:      r.self,
		Voters:    voters,
		Learners:  learners,
		Dir:       filepath.Join(groupDir(a.cfg.DataDir, gr.id), "raft"),
		Engine:    lr.engine,
		Handoff:   lr.handoff,
		Transport: r.transport,
		FetchSnapshot: func(ctx context.Context, from model.NodeID, _ model.Index) (replication.Membership, error) {
			return a.fetchImage(ctx, gr, lr, from)
		},
		OnRoleChange: func(model.NodeID, model.Term) {
			gr.relays.closeUpstreams() // relayed connections follow the leader
			if gr.id == 0 {
				r.kafkaRelays.closeUpstreams()
			}
		},
		Logger: a.log,
	})
	if err != nil {
		return fmt.Errorf("group %d: %w", gr.id, err)
	}
	r.transport.Register(lr.raft)
	gr.local.Store(lr)
	return nil
}

// hosting runs the lead loops of the groups this member hosts and starts
// and drops replicas as the placement changes.
type hosting struct {
	a       *App
	ctx     context.Context
	g       *errgroup.Group
	routes  [][]*listenerRoute
	front   *kafkaFront
	handler *switchHandler // group 0's: the admin API
	budget  *task.ByteBudget

	mu      sync.Mutex
	running map[model.GroupID]*hostedRun
	busy    map[model.GroupID]bool // a replica being started
}

// hostedRun is a hosted group's lead loop.
type hostedRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// lead runs group gr's lead loop over its replica lr.
func (h *hosting) lead(gr *groupReplica, lr *localReplica) {
	ctx, cancel := context.WithCancel(h.ctx)
	run := &hostedRun{cancel: cancel, done: make(chan struct{})}
	h.mu.Lock()
	h.running[gr.id] = run
	h.mu.Unlock()
	handler := h.handler
	if gr.id != 0 {
		handler = nil // the admin API follows group 0
	}
	h.g.Go(func() error {
		defer close(run.done)
		err := h.a.leadLoop(ctx, gr, lr, h.routes[gr.id], h.front, handler, h.budget)
		if gr.id == 0 || !errors.Is(err, ErrRestartToInstall) || ctx.Err() != nil {
			return err // group 0's engine is the node's: the node restarts
		}
		// The replica fetched an image of its leader's engine: it
		// starts again over it, the member goes on.
		h.close(gr, lr)
		h.mu.Lock()
		h.busy[gr.id] = true
		h.mu.Unlock()
		h.g.Go(func() error { h.host(h.ctx, gr); return nil })
		return nil
	})
}

// close stops replica lr of group gr and closes its engine.
func (h *hosting) close(gr *groupReplica, lr *localReplica) {
	gr.local.CompareAndSwap(lr, nil)
	lr.raft.Stop()
	h.a.replica.transport.Unregister(lr.raft)
	gr.relays.closeUpstreams()
	if err := lr.engine.Close(); err != nil {
		h.a.log.Warn("closing a group replica's engine", "group", gr.id, "err", err)
	}
}

// tend starts a replica of each group the placement or the group's
// published membership names this member in, and drops the replica of
// each group whose leader removed it, until ctx ends.
func (h *hosting) tend(ctx context.Context) {
	a, r := h.a, h.a.replica
	for {
		sleepCtx(ctx, membershipInterval)
		if ctx.Err() != nil {
			return
		}
		if _, ok := r.members()[r.self]; !ok {
			continue // removed from the cluster: its replicas wait for it to stop
		}
		for _, gr := range r.groups[1:] {
			h.mu.Lock()
			busy := h.busy[gr.id]
			h.mu.Unlock()
			if busy {
				continue
			}
			placed := slices.Contains(r.placed(gr.id), r.self)
			lr := gr.hosted()
			if lr != nil && placed {
				continue // hosted where it belongs
			}
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			m, published, err := a.publishedMembership(gctx, gr.id)
			cancel()
			if err != nil {
				continue
			}
			switch {
			case lr == nil && (placed || m.Has(r.self)):
				h.mu.Lock()
				h.busy[gr.id] = true
				h.mu.Unlock()
				h.g.Go(func() error { h.host(ctx, gr); return nil })
			case lr != nil && !placed && published && !m.Has(r.self):
				if leader, _ := lr.raft.Leader(); leader != r.self {
					h.drop(gr)
				}
			}
		}
	}
}

// host starts a replica of group gr on this member (the group's leader
// adds it as a learner) and runs its lead loop.
func (h *hosting) host(ctx context.Context, gr *groupReplica) {
	a := h.a
	defer func() {
		h.mu.Lock()
		delete(h.busy, gr.id)
		h.mu.Unlock()
	}()
	a.log.Info("starting a replica of the group", "group", gr.id)
	lr, err := a.openGroupEngine(a.replica.engineBase, gr.id)
	if err == nil {
		if err = a.startGroupReplica(ctx, gr, lr); err != nil {
			_ = lr.engine.Close()
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("starting a replica of the group failed; trying again later", "group", gr.id, "err", err)
		}
		return
	}
	h.lead(gr, lr)
}

// drop stops this member's replica of group gr, which its leader removed
// from the group, and deletes its files.
func (h *hosting) drop(gr *groupReplica) {
	a := h.a
	if gr.id == 0 {
		return // group 0's files are the node's data directory
	}
	h.mu.Lock()
	run := h.running[gr.id]
	delete(h.running, gr.id)
	h.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
	lr := gr.hosted()
	if lr == nil {
		return
	}
	h.close(gr, lr)
	dir := groupDir(a.cfg.DataDir, gr.id)
	if err := os.RemoveAll(dir); err != nil {
		a.log.Warn("deleting a dropped replica's files", "group", gr.id, "dir", dir, "err", err)
	}
	a.log.Info("dropped the replica of a group this member no longer hosts", "group", gr.id)
}

// hostedEngines opens, as the member starts, the engines of the groups
// 1.. it hosts (hostsAtStart).
func (a *App) hostedEngines(ctx context.Context, base storage.Config) error {
	r := a.replica
	r.engineBase = base
	for _, gr := range r.groups[1:] {
		ok, err := a.hostsAtStart(ctx, gr.id)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		lr, err := a.openGroupEngine(base, gr.id)
		if err != nil {
			return err
		}
		r.opened[gr.id] = lr
	}
	return nil
}
