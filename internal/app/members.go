package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/meta/etcdembed"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// Members joining and leaving. The cluster's members are recorded in the
// metadata (membersKey) when it is made, from cluster.members; after that
// the record is the truth and cluster.members only says how to reach the
// metadata. Adding a member (addMember) records it (and adds it to the
// embedded etcd as a learner); every member then connects to it, and each
// group's leader moves the group towards its placement over the members
// (groupVoters): it adds the members the placement names as Raft learners,
// promotes them to voters once they hold everything committed, then
// removes the voters it no longer names (reconcileMembers).
// Removing one records its absence: leaders remove it from their groups
// (a leader being removed hands its group off first), then it leaves the
// embedded etcd. Each group's leader publishes the group's membership
// (groupMembersKey), from which a member that joined later starts its
// replicas.

// membersKey holds the cluster's members, as cluster.members spells them.
const membersKey = "cluster/members"

// groupMembersKey holds group g's membership as its leader applied it.
func groupMembersKey(g model.GroupID) string { return fmt.Sprintf("cluster/group-members/%d", g) }

// membershipInterval is how often a group's leader checks its members
// against the cluster's and members check the recorded list.
const membershipInterval = 500 * time.Millisecond

// members returns the cluster's members by id (do not modify).
func (r *replica) members() map[model.NodeID]string { return *r.hosts.Load() }

// setMembers replaces the cluster's members; the hosts of members that
// left stay known (a group they still lead is reached there until it
// moves).
func (r *replica) setMembers(m map[model.NodeID]string) {
	r.hostsMu.Lock()
	defer r.hostsMu.Unlock()
	known := map[model.NodeID]string{}
	if k := r.known.Load(); k != nil {
		maps.Copy(known, *k)
	}
	maps.Copy(known, m)
	r.known.Store(&known)
	r.hosts.Store(&m)
}

// hostOf is the host of node id: a member's, or one that left ("" and
// false for a node never known).
func (r *replica) hostOf(id model.NodeID) (string, bool) {
	if h, ok := r.members()[id]; ok {
		return h, true
	}
	if k := r.known.Load(); k != nil {
		h, ok := (*k)[id]
		return h, ok
	}
	return "", false
}

// formatMembers spells members as cluster.members does, in id order.
func formatMembers(m map[model.NodeID]string) string {
	parts := make([]string, 0, len(m))
	for _, id := range sortedIDs(m) {
		parts = append(parts, fmt.Sprintf("%d=%s", id, m[id]))
	}
	return strings.Join(parts, ",")
}

// parseMembers reads a recorded member list.
func parseMembers(s string) (map[model.NodeID]string, error) {
	m, err := ClusterConfig{Members: s}.members()
	if err == nil && len(m) == 0 {
		err = fmt.Errorf("%w: empty member list", model.ErrInvalidConfig)
	}
	return m, err
}

// resolveMembers settles the cluster's members once the metadata is open:
// the recorded list (recorded from cluster.members when the cluster is
// made). A node not in it was never added, or was removed.
func (a *App) resolveMembers(ctx context.Context) error {
	r := a.replica
	_, err := a.meta.Txn(ctx, []meta.Compare{{Key: membersKey, Target: meta.CompareCreate}},
		[]meta.Op{{Key: membersKey, Value: []byte(formatMembers(r.members()))}})
	if err != nil && !errors.Is(err, meta.ErrConflict) {
		return err
	}
	kv, err := a.meta.Get(ctx, membersKey)
	if err != nil {
		return err
	}
	recorded, err := parseMembers(string(kv.Value))
	if err != nil {
		return fmt.Errorf("the cluster's recorded members: %w", err)
	}
	if _, ok := recorded[r.self]; !ok {
		return fmt.Errorf("%w: node %d is not a member of cluster %q (members: %s); add it first with `rosetta cluster member add %d=<host>` against a member",
			model.ErrInvalidConfig, r.self, a.cfg.Cluster.Name, kv.Value, r.self)
	}
	if got := formatMembers(recorded); got != formatMembers(r.members()) {
		a.log.Info("the cluster's members differ from cluster.members; the cluster's record holds", "members", got)
	}
	r.setMembers(recorded)
	return nil
}

// watchMembers follows the recorded member list: members that join are
// connected to, members that leave are dropped.
func (a *App) watchMembers(ctx context.Context) {
	r := a.replica
	t := time.NewTicker(membershipInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		kv, err := a.meta.Get(gctx, membersKey)
		cancel()
		if err != nil {
			continue
		}
		next, err := parseMembers(string(kv.Value))
		cur := r.members()
		if err != nil || maps.Equal(next, cur) {
			continue
		}
		for id, host := range next {
			if cur[id] != host {
				r.transport.AddPeer(id, net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.RaftPort)))
			}
		}
		for id := range cur {
			if _, ok := next[id]; !ok && id != r.self {
				r.transport.RemovePeer(id)
			}
		}
		r.setMembers(next)
		a.log.Info("the cluster's members changed", "members", formatMembers(next))
		if _, ok := next[r.self]; !ok {
			a.log.Warn("this node was removed from the cluster: its groups go on without it; stop it")
		}
	}
}

// initialMembership is the membership a replica of group gr starts with:
// none for one that has run before (its own record holds); for a new one,
// the group's as its leader published it — waiting until this node is in
// it — or, for a group being made, every member as a voter.
func (a *App) initialMembership(ctx context.Context, gr *groupReplica) (voters, learners []model.NodeID, err error) {
	r := a.replica
	state := filepath.Join(groupDir(a.cfg.DataDir, gr.id), "raft", "state.json")
	if _, err := os.Stat(state); err == nil {
		return placedSorted(r.placed(gr.id)), nil, nil // read from its state file
	}
	deadline := time.Now().Add(joinWait)
	for {
		kv, err := a.meta.Get(ctx, groupMembersKey(gr.id))
		if errors.Is(err, meta.ErrNotFound) {
			return placedSorted(r.placed(gr.id)), nil, nil // the group is being made
		}
		if err != nil {
			return nil, nil, err
		}
		var m replication.Membership
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, nil, fmt.Errorf("%w: group %d's recorded membership: %w", model.ErrCorruptRecord, gr.id, err)
		}
		if m.Has(r.self) {
			a.log.Info("joining the group", "group", gr.id, "voters", m.Voters, "learners", m.Learners)
			return m.Voters, m.Learners, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("group %d has not added this node after %v (its leader adds members the cluster records)", gr.id, joinWait)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(membershipInterval):
		}
	}
}

// joinWait bounds how long a joining member waits for a group to add it.
const joinWait = time.Minute

// reconcileMembers, on a group's leader, moves the group one step towards
// having the cluster's members as voters, and publishes the group's
// membership when it changed (published: what was published last).
func (a *App) reconcileMembers(ctx context.Context, gr *groupReplica, lr *localReplica, published *string) {
	r := a.replica
	want := placedSorted(r.placed(gr.id))
	st := lr.raft.Status()
	if st.Leader != r.self || len(st.Voters) == 0 {
		return
	}
	b, _ := json.Marshal(replication.Membership{Voters: st.Voters, Learners: st.Learners})
	if string(b) != *published {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := meta.Put(pctx, a.meta, groupMembersKey(gr.id), b)
		cancel()
		if err != nil {
			a.log.Warn("publishing the group's membership failed", "group", gr.id, "err", err)
		} else {
			*published = string(b)
		}
	}
	if slices.Equal(st.Voters, want) && len(st.Learners) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	step, err := lr.raft.Reconcile(rctx, want)
	switch {
	case err != nil:
		a.log.Info("group membership", "group", gr.id, "err", err)
	case step.Kind != "":
		a.log.Info("group membership", "group", gr.id, "step", step.Kind, "node", step.Node)
	}
}

// memberEtcdEndpoints are the embedded etcd client URLs of the cluster's
// members but except (this member's first).
func (a *App) memberEtcdEndpoints(except model.NodeID) []string {
	r := a.replica
	m := r.members()
	url := func(id model.NodeID) string {
		return a.etcdScheme() + "://" + net.JoinHostPort(m[id], strconv.Itoa(a.cfg.Cluster.EtcdPort))
	}
	out := []string{url(r.self)}
	for _, id := range sortedIDs(m) {
		if id != r.self && id != except {
			out = append(out, url(id))
		}
	}
	return out
}

// etcdPeerURL is the embedded etcd peer URL of a member on host.
func (a *App) etcdPeerURL(host string) string {
	return a.etcdScheme() + "://" + net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.EtcdPort+1))
}

// addMember adds node id on host to the cluster: the embedded etcd gets
// it as a learner, the record lists it, and the answer waits (up to
// memberChangeWait) until every group whose placement names it has added
// it as a learner, so the node can be started.
func (a *App) addMember(ctx context.Context, id model.NodeID, host string) error {
	if id <= 0 || host == "" || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
		return fmt.Errorf("%w: a member needs a positive id and a host (no port)", model.ErrInvalidConfig)
	}
	cur := a.replica.members()
	if h, ok := cur[id]; ok {
		if h == host && a.cfg.Cluster.EtcdEndpoints == "" {
			// A member already: it is made sure of in etcd too (a member
			// whose rejoin with a replaced disk removed its old etcd
			// self but could not add its new one is listed again).
			return etcdembed.AddLearner(ctx, a.memberEtcdEndpoints(0), a.etcdTLS(), a.etcdPeerURL(host))
		}
		if h == host {
			return nil
		}
		return fmt.Errorf("%w: node %d is a member already, on %s", model.ErrInvalidConfig, id, h)
	}
	for other, h := range cur {
		if h == host {
			return fmt.Errorf("%w: host %s is node %d's", model.ErrInvalidConfig, host, other)
		}
	}
	if a.cfg.Cluster.EtcdEndpoints == "" && len(cur) >= maxMembers {
		return fmt.Errorf("%w: a cluster on the members' embedded etcd has up to %d members; larger ones use an external etcd", model.ErrInvalidConfig, maxMembers)
	}
	if a.cfg.Cluster.EtcdEndpoints == "" {
		if err := etcdembed.AddLearner(ctx, a.memberEtcdEndpoints(0), a.etcdTLS(), a.etcdPeerURL(host)); err != nil {
			return err
		}
	}
	next := maps.Clone(cur)
	next[id] = host
	if err := a.recordMembers(ctx, cur, next); err != nil {
		return err
	}
	a.log.Info("member added", "node", id, "host", host)
	return a.waitGroups(ctx, func(g model.GroupID, m replication.Membership) bool {
		return m.Has(id) || !slices.Contains(groupVoters(next, g, a.replica.factor), id)
	})
}

// removeMember removes node id from the cluster: the record drops it, the
// answer waits (up to memberChangeWait) until no group has it, and the
// embedded etcd removes it.
func (a *App) removeMember(ctx context.Context, id model.NodeID) error {
	cur := a.replica.members()
	host, ok := cur[id]
	if !ok {
		return fmt.Errorf("%w: node %d is not a member", model.ErrNotFound, id)
	}
	if len(cur) == 1 {
		return fmt.Errorf("%w: the cluster's last member cannot leave", model.ErrInvalidConfig)
	}
	next := maps.Clone(cur)
	delete(next, id)
	if err := a.recordMembers(ctx, cur, next); err != nil {
		return err
	}
	a.log.Info("member removed", "node", id)
	if err := a.waitGroups(ctx, func(_ model.GroupID, m replication.Membership) bool { return !m.Has(id) }); err != nil {
		return err
	}
	if a.cfg.Cluster.EtcdEndpoints == "" {
		return etcdembed.RemoveMember(ctx, a.memberEtcdEndpoints(id), a.etcdTLS(), a.etcdPeerURL(host))
	}
	return nil
}

// recordMembers replaces the recorded member list cur with next (refused
// if it changed meanwhile).
func (a *App) recordMembers(ctx context.Context, cur, next map[model.NodeID]string) error {
	changed := fmt.Errorf("%w: the cluster's members changed meanwhile; try again", meta.ErrConflict)
	kv, err := a.meta.Get(ctx, membersKey)
	if err != nil {
		return err
	}
	if string(kv.Value) != formatMembers(cur) {
		return changed
	}
	_, err = a.meta.Txn(ctx, []meta.Compare{{Key: membersKey, Target: meta.CompareMod, Revision: kv.Revision}},
		[]meta.Op{{Key: membersKey, Value: []byte(formatMembers(next))}})
	if errors.Is(err, meta.ErrConflict) {
		return changed
	}
	return err
}

// memberChangeWait bounds how long a member change waits for the groups.
const memberChangeWait = 30 * time.Second

// waitGroups waits until every group's published membership satisfies ok.
func (a *App) waitGroups(ctx context.Context, ok func(model.GroupID, replication.Membership) bool) error {
	ctx, cancel := context.WithTimeout(ctx, memberChangeWait)
	defer cancel()
	for {
		done := true
		for _, gr := range a.replica.groups {
			kv, err := a.meta.Get(ctx, groupMembersKey(gr.id))
			var m replication.Membership
			if err != nil || json.Unmarshal(kv.Value, &m) != nil || !ok(gr.id, m) {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the groups did not take the change in %v: %w (they go on trying)", memberChangeWait, ctx.Err())
		case <-time.After(membershipInterval / 2):
		}
	}
}

// clusterOps are a member's cluster endpoints.
func (a *App) clusterOps() admin.ClusterOps {
	return admin.ClusterOps{Status: a.clusterStatus, AddMember: a.addMember, RemoveMember: a.removeMember}
}
