package member

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/member/directory"
	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/meta/etcdembed"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// Members joining and leaving. The cluster's members are recorded in the
// metadata (directory.MembersKey) when it is made, from cluster.members;
// after that the record is the truth and cluster.members only says how to
// reach the metadata. Adding a member (AddMember) records it (and adds it
// to the embedded etcd as a learner); every member then connects to it,
// and each group's leader moves the group towards its placement over the
// members (placement.Voters): it adds the members the placement names as
// Raft learners, promotes them to voters once they hold everything
// committed, then removes the voters it no longer names
// (reconcileMembers). Removing one records its absence: leaders remove it
// from their groups (a leader being removed hands its group off first),
// then it leaves the embedded etcd. Each group's leader publishes the
// group's membership, from which a member that joined later starts its
// replicas.

// memberChangeWait bounds how long a member change waits for the groups.
const memberChangeWait = 30 * time.Second

// watchMembers follows the recorded member list: members that join are
// connected to, members that leave are dropped.
func (m *Member) watchMembers(ctx context.Context) {
	m.dir.WatchMembers(ctx, membershipInterval, func(cur, next placement.Members) {
		for id, host := range next {
			if cur[id] != host {
				m.transport.AddPeer(id, net.JoinHostPort(host, strconv.Itoa(m.cfg.RaftPort)))
			}
		}
		for id := range cur {
			if _, ok := next[id]; !ok && id != m.cfg.Self {
				m.transport.RemovePeer(id)
			}
		}
		m.log.Info("the cluster's members changed", "members", directory.FormatMembers(next))
		if _, ok := next[m.cfg.Self]; !ok {
			m.log.Warn("this node was removed from the cluster: its groups go on without it; stop it")
		}
	})
}

// memberEtcdEndpoints are the embedded etcd client URLs of the cluster's
// members but except (this member's first).
func (m *Member) memberEtcdEndpoints(except model.NodeID) []string {
	if m.etcd == nil {
		return m.etcdClients
	}
	mm := m.Members()
	out := []string{m.etcdClientURL(mm[m.cfg.Self])}
	for _, id := range placement.SortedIDs(mm) {
		if id != m.cfg.Self && id != except {
			out = append(out, m.etcdClientURL(mm[id]))
		}
	}
	return out
}

// embeddedEtcd says whether the cluster's metadata is in the members'
// embedded etcd.
func (m *Member) embeddedEtcd() bool { return len(m.cfg.EtcdEndpoints) == 0 }

// AddMember adds node id on host to the cluster: the embedded etcd gets
// it as a learner, the record lists it, and the answer waits (up to
// memberChangeWait) until every group whose placement names it has added
// it as a learner, so the node can be started.
func (m *Member) AddMember(ctx context.Context, id model.NodeID, host string) error {
	if id <= 0 || host == "" || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
		return fmt.Errorf("%w: a member needs a positive id and a host (no port)", model.ErrInvalidConfig)
	}
	cur := m.Members()
	if h, ok := cur[id]; ok {
		if h == host && m.embeddedEtcd() {
			// A member already: it is made sure of in etcd too (a member
			// whose rejoin with a replaced disk removed its old etcd
			// self but could not add its new one is listed again).
			_, err := etcdembed.AddLearner(ctx, m.memberEtcdEndpoints(0), m.EtcdTLS(), m.etcdPeerURL(host), placement.EtcdMembers)
			return err
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
	if len(cur) >= placement.MaxMembers {
		return fmt.Errorf("%w: a cluster has up to %d members", model.ErrInvalidConfig, placement.MaxMembers)
	}
	if m.embeddedEtcd() {
		// The etcd gets the member while it has fewer than
		// placement.EtcdMembers; past them, the member is its client.
		added, err := etcdembed.AddLearner(ctx, m.memberEtcdEndpoints(0), m.EtcdTLS(), m.etcdPeerURL(host), placement.EtcdMembers)
		if err != nil {
			return err
		}
		if !added {
			m.log.Info("the cluster's etcd has its members: the new member will be its client", "node", id)
		}
	}
	next := maps.Clone(cur)
	next[id] = host
	if err := m.dir.RecordMembers(ctx, cur, next); err != nil {
		return err
	}
	m.log.Info("member added", "node", id, "host", host)
	return m.waitGroups(ctx, func(g model.GroupID, gm replication.Membership) bool {
		return gm.Has(id) || !slices.Contains(placement.Voters(next, g, m.FactorOf(g)), id)
	})
}

// RemoveMember removes node id from the cluster: the record drops it, the
// answer waits (up to memberChangeWait) until no group has it, and the
// embedded etcd removes it.
func (m *Member) RemoveMember(ctx context.Context, id model.NodeID) error {
	cur := m.Members()
	host, ok := cur[id]
	if !ok {
		return fmt.Errorf("%w: node %d is not a member", model.ErrNotFound, id)
	}
	if len(cur) == 1 {
		return fmt.Errorf("%w: the cluster's last member cannot leave", model.ErrInvalidConfig)
	}
	next := maps.Clone(cur)
	delete(next, id)
	if err := m.dir.RecordMembers(ctx, cur, next); err != nil {
		return err
	}
	m.log.Info("member removed", "node", id)
	if err := m.waitGroups(ctx, func(_ model.GroupID, gm replication.Membership) bool { return !gm.Has(id) }); err != nil {
		return err
	}
	if m.embeddedEtcd() {
		return etcdembed.RemoveMember(ctx, m.memberEtcdEndpoints(id), m.EtcdTLS(), m.etcdPeerURL(host))
	}
	return nil
}

// waitGroups waits until every group's published membership satisfies ok.
func (m *Member) waitGroups(ctx context.Context, ok func(model.GroupID, replication.Membership) bool) error {
	ctx, cancel := context.WithTimeout(ctx, memberChangeWait)
	defer cancel()
	if err := m.dir.WaitGroups(ctx, len(m.Groups()), membershipInterval/2, ok); err != nil {
		return fmt.Errorf("the groups did not take the change in %v: %w (they go on trying)", memberChangeWait, err)
	}
	return nil
}

// electCall asks a group's leader to hand the group to a member.
type electCall struct {
	Group int          `json:"g"`
	Node  model.NodeID `json:"n,omitempty"`
}

// callGroupElect runs an election call on group g's leader.
func callGroupElect(ctx context.Context, m *Member, g int, node model.NodeID) (struct{}, error) {
	return peer.CallGroup[electCall, struct{}](ctx, m.peers, g, peer.Elect, electCall{Group: g, Node: node})
}

// answerElect hands a group this member leads to the member a call names.
func (m *Member) answerElect(ctx context.Context, _ model.NodeID, c electCall) (struct{}, error) {
	gr := m.group(model.GroupID(c.Group))
	if gr == nil {
		return struct{}{}, fmt.Errorf("%w: group %d", model.ErrNotLeader, c.Group)
	}
	r := gr.Hosted()
	if r == nil {
		return struct{}{}, fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, c.Group)
	}
	if err := r.Raft.TransferLeadership(ctx, c.Node); err != nil {
		return struct{}{}, err
	}
	m.log.Info("leadership moved by a preferred leader election", "group", c.Group, "to", c.Node)
	return struct{}{}, nil
}

// errNoSuch is an election naming a member or group that does not exist.
func errNoSuch(what string, n int) error {
	return fmt.Errorf("%w: no %s %d", model.ErrNotFound, what, n)
}
