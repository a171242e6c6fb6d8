// Package placement holds the pure rules of where a cluster's replication
// groups live: which members vote in a group (and in which order, the
// preferred leader first), which member a group prefers as its leader, and
// the ports and directories a group takes. Nothing here reads a clock, the
// network or the metadata: every answer is a function of its arguments, so
// every member computes the same placement from the same member list.
//
// Queues are placed on groups by route.GroupOf (queue i in group i mod G);
// this package places groups on members.
package placement

import (
	"net"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/rosettamq/rosetta/internal/model"
)

// DefaultReplicationFactor is how many voters a group other than group 0
// has on a cluster of more members unless cluster.replication_factor says
// otherwise (Kafka's usual replication factor).
const DefaultReplicationFactor = 3

// MaxReplicationFactor is the most copies a group keeps (five voters
// survive two failures; more would slow every commit for little).
const MaxReplicationFactor = 5

// EtcdMembers is how many members run an embedded etcd member: the
// metadata's quorum stays at most five (etcd's advice), and members past
// them are etcd clients.
const EtcdMembers = 5

// MaxMembers bounds the members of one cluster (the member list is one
// metadata record, every group's placement a function of it).
const MaxMembers = 64

// EtcdVoters are the members that run the embedded etcd of a cluster being
// made: the EtcdMembers lowest ids.
func EtcdVoters(members Members) []model.NodeID {
	ids := SortedIDs(members)
	return ids[:min(len(ids), EtcdMembers)]
}

// Members are a cluster's members by id, each with its host.
type Members = map[model.NodeID]string

// SortedIDs returns the ids of members in order.
func SortedIDs(members Members) []model.NodeID {
	ids := make([]model.NodeID, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Voters is the placement of group g over members with factor copies: the
// voters it should have, its preferred leader first. Group 0, which serves
// every listener and the node-wide state, has every member; so has every
// group on a cluster of up to factor members. On a larger one group g has
// factor voters, the members from its preferred leader on in id order
// (wrapping), so the copies spread evenly. factor 0 is the default.
func Voters(members Members, g model.GroupID, factor int) []model.NodeID {
	ids := SortedIDs(members)
	if len(ids) == 0 {
		return nil
	}
	n := len(ids)
	if factor <= 0 {
		factor = DefaultReplicationFactor
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

// VoterHosts is Voters with each member's host.
func VoterHosts(members Members, g model.GroupID, factor int) Members {
	out := Members{}
	for _, id := range Voters(members, g, factor) {
		out[id] = members[id]
	}
	return out
}

// Sorted is a placement in id order (as Raft keeps voters).
func Sorted(ids []model.NodeID) []model.NodeID {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// PreferredLeader is the member group g prefers as its leader, spreading
// leaders over the members: the (g mod members)-th member by id (0 for no
// members).
func PreferredLeader(members Members, g model.GroupID) model.NodeID {
	ids := SortedIDs(members)
	if len(ids) == 0 {
		return 0
	}
	return ids[int(g)%len(ids)]
}

// GroupPort is the port group g's RocketMQ listeners take on every member:
// the port of the listener on addr + g (false without a port).
func GroupPort(addr string, g model.GroupID) (int, bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return 0, false
	}
	return p + int(g), true
}

// GroupDir is where group g keeps its log and Raft state (group 0 in the
// data directory itself, as a node of one group always did).
func GroupDir(dataDir string, g model.GroupID) string {
	if g == 0 {
		return dataDir
	}
	return filepath.Join(dataDir, "groups", strconv.Itoa(int(g)))
}
