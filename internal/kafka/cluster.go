package kafka

import (
	"sort"

	"github.com/rosettamq/rosetta/internal/broker"
)

// ClusterView is what a cluster member tells Kafka clients about the
// cluster: every node's host (each listens on the same ports as this one,
// so a client of one listener finds the others at their hosts and this
// listener's port), which node leads (and coordinates), and the replicas
// of every partition with the ones in sync.
type ClusterView struct {
	Hosts map[int32]string
	// Groups describes each replication group (partition p belongs to
	// group p mod len(Groups)).
	Groups []GroupView
}

// GroupView is one replication group as Kafka clients see its partitions.
type GroupView struct {
	Leader   int32 // -1 while unknown
	Epoch    int32 // the leader's epoch as this member knows it
	Replicas []int32
	ISR      []int32
}

// clusterView returns the cluster's view (nil on a single node).
func (s *Server) clusterView() *ClusterView {
	if s.opts.Cluster == nil {
		return nil
	}
	return s.opts.Cluster()
}

// brokerAddr is one broker's id and address.
type brokerAddr struct {
	id   int32
	host string
	port int32
}

// brokers lists the brokers a client of c is told about: this node at its
// advertised address and, in a cluster, the others at their hosts and the
// same port.
func (s *Server) brokers(c *conn) []brokerAddr {
	host, port := s.advertised(c)
	self := brokerAddr{s.opts.NodeID, host, port}
	v := s.clusterView()
	if v == nil {
		return []brokerAddr{self}
	}
	out := make([]brokerAddr, 0, len(v.Hosts))
	for id, h := range v.Hosts {
		if id == s.opts.NodeID {
			out = append(out, self)
		} else {
			out = append(out, brokerAddr{id, h, port})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// controller is the node clients are told is the controller: group 0's
// leader.
func (s *Server) controller() int32 {
	if v := s.clusterView(); v != nil && len(v.Groups) > 0 && v.Groups[0].Leader > 0 {
		return v.Groups[0].Leader
	}
	return s.opts.NodeID
}

// groupView returns a replication group's view (this node alone on a
// single node).
func (s *Server) groupView(g int) GroupView {
	if v := s.clusterView(); v != nil && g < len(v.Groups) {
		return v.Groups[g]
	}
	self := []int32{s.opts.NodeID}
	return GroupView{Leader: s.opts.NodeID, Epoch: -1, Replicas: self, ISR: self}
}

// copies is how many copies every partition of topic t keeps at least:
// the fewest voters of the groups holding them (one on a single node);
// asked, the factor the topic was made with, while one of its groups is
// not known here yet. Without a topic (validate-only): asked, else the
// cluster's (group 0's voters).
func (s *Server) copies(t *broker.Topic, asked int) int {
	v := s.clusterView()
	switch {
	case v == nil:
		return 1
	case t == nil && asked > 0:
		return asked
	case t == nil && len(v.Groups) > 0:
		return max(len(v.Groups[0].Replicas), 1)
	case t == nil:
		return 1
	}
	rf := 0
	for i := range t.All {
		g := int(t.GroupOf(i))
		if g >= len(v.Groups) || len(v.Groups[g].Replicas) == 0 {
			if asked > 0 {
				return asked
			}
			continue
		}
		if r := len(v.Groups[g].Replicas); rf == 0 || r < rf {
			rf = r
		}
	}
	return max(rf, 1)
}

// groupLeader returns a group's leader and epoch (-1 while unknown).
func (s *Server) groupLeader(g int) (leader, epoch int32) {
	v := s.groupView(g)
	return v.Leader, v.Epoch
}
