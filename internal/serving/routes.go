package serving

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/rosettamq/rosetta/internal/grpcv5"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting"
	"github.com/rosettamq/rosetta/internal/replication"
)

// What each protocol's clients are told of a cluster: Kafka metadata, and
// the RocketMQ routes of remoting and gRPC clients, from the member
// runtime's view of the members and the groups' leaders.

// groupBrokerName is the RocketMQ broker name of group g: the default one
// on a cluster of one group (as a single node), <cluster name>-<g>
// otherwise.
func (n *Node) groupBrokerName(g model.GroupID) string {
	if n.Groups <= 1 && g == 0 { // (groups added later have names of their own)
		return ""
	}
	return fmt.Sprintf("%s-%d", n.ClusterName, g)
}

// brokerRoutes describes every group as a RocketMQ broker to clients of
// the listener on addr (group g's at the listener's port + g): its name
// and, by broker id, the member leading it (0, absent while none does)
// and its other replicas (1..). A client that came through a protocol-only
// node (connected from its host) is told of the protocol-only nodes
// instead (protocolRoutes). Nil on a cluster of one group, whose clients
// keep the address they asked (see relayedAdvertise).
func (n *Node) brokerRoutes(listener string) func(remote net.Addr) []remoting.BrokerRoute {
	m := n.Member
	if m == nil || len(m.Groups()) == 1 {
		return nil
	}
	return func(remote net.Addr) []remoting.BrokerRoute {
		if via, others := n.viaProtocolNode(remote); via != "" {
			return n.protocolRoutes(listener, via, others)
		}
		out := make([]remoting.BrokerRoute, len(m.Groups()))
		for i, gr := range m.Groups() {
			br := remoting.BrokerRoute{Name: n.groupBrokerName(gr.ID()), Addrs: map[int64]string{}}
			port, ok := placement.GroupPort(n.Addr(listener), gr.ID())
			if !ok {
				out[i] = br
				continue
			}
			addr := func(id model.NodeID) string {
				h, _ := m.HostOf(id)
				return net.JoinHostPort(h, strconv.Itoa(port))
			}
			leader, _ := gr.Leader()
			if _, known := m.HostOf(leader); leader != 0 && known {
				br.Addrs[0] = addr(leader)
			}
			next := int64(1)
			for _, id := range placement.Sorted(m.Placed(gr.ID())) {
				if id != leader {
					br.Addrs[next] = addr(id)
					next++
				}
			}
			out[i] = br
		}
		return out
	}
}

// viaProtocolNode is the host of the protocol-only node a client connected
// from remote came through ("" for none) and the other protocol-only
// nodes' hosts, sorted.
func (n *Node) viaProtocolNode(remote net.Addr) (via string, others []string) {
	if remote == nil {
		return "", nil
	}
	host, _, err := net.SplitHostPort(remote.String())
	nodes := n.Member.ProtocolNodes()
	if _, ok := nodes[host]; err != nil || !ok {
		return "", nil
	}
	for h := range nodes {
		if h != host {
			others = append(others, h)
		}
	}
	slices.Sort(others)
	return host, others
}

// protocolRoutes describes every group to a client of a protocol-only node
// (via; others are the other protocol-only nodes): each group with a
// leader is a broker at protocol-only nodes' port of the group, so the
// client reaches the cluster through protocol-only nodes alone, each
// relaying to the group's leader. RocketMQ remoting clients send to a
// broker's first address: group g's is the (g mod n)-th of the n
// protocol-only nodes, so their connections spread over them and a dead
// one costs the sends to its brokers a retry on another broker (as a dead
// RocketMQ broker does) until routes drop it. gRPC clients take the first
// address that answers of every protocol-only node's.
func (n *Node) protocolRoutes(listener, via string, others []string) []remoting.BrokerRoute {
	hosts := append([]string{via}, others...)
	slices.Sort(hosts)
	groups := n.Member.Groups()
	out := make([]remoting.BrokerRoute, len(groups))
	for i, gr := range groups {
		out[i] = remoting.BrokerRoute{Name: n.groupBrokerName(gr.ID()), Addrs: map[int64]string{}}
		port, ok := placement.GroupPort(n.Addr(listener), gr.ID())
		if leader, _ := gr.Leader(); !ok || leader == 0 {
			continue
		}
		if listener != "grpc" {
			out[i].Addrs[0] = net.JoinHostPort(hosts[int(gr.ID())%len(hosts)], strconv.Itoa(port))
			continue
		}
		for j, h := range hosts {
			out[i].Addrs[int64(j)] = net.JoinHostPort(h, strconv.Itoa(port))
		}
	}
	return out
}

// pulsarGroupAddr names where Pulsar clients of group g's queues connect
// (nil on a single node; local and remote may be nil: a request another
// member forwarded): group g's Pulsar port (the listener's + g) on
// the member leading it — a client that came through a protocol-only node
// is sent back to that node, which relays — or, while no leader is known,
// on the host the client reached, whose member relays once one is.
// pulsar+ssl:// clients take the same port (a member's Pulsar listener
// takes TLS too unless listen.pulsar_tls is disabled).
func (n *Node) pulsarGroupAddr() func(g model.GroupID, local, remote net.Addr) string {
	m := n.Member
	if m == nil {
		return nil
	}
	return func(g model.GroupID, local, remote net.Addr) string {
		port, ok := placement.GroupPort(n.Addr("pulsar"), g)
		if !ok {
			return ""
		}
		at := func(host string) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
		if via, _ := n.viaProtocolNode(remote); via != "" {
			return at(via)
		}
		if groups := m.Groups(); int(g) < len(groups) {
			if leader, _ := groups[g].Leader(); leader != 0 {
				if h, known := m.HostOf(leader); known {
					return at(h)
				}
			}
		}
		if local == nil {
			return ""
		}
		host, _, err := net.SplitHostPort(local.String())
		if err != nil {
			return ""
		}
		return at(host)
	}
}

// grpcRoutes is brokerRoutes for the gRPC listeners.
func (n *Node) grpcRoutes() func(remote net.Addr) []grpcv5.BrokerRoute {
	routes := n.brokerRoutes("grpc")
	if routes == nil {
		return nil
	}
	return func(remote net.Addr) []grpcv5.BrokerRoute {
		rs := routes(remote)
		out := make([]grpcv5.BrokerRoute, len(rs))
		for i, r := range rs {
			out[i].Name = r.Name
			if r.Addrs[0] == "" {
				continue // no leader: its queues are left out
			}
			for id := int64(0); id < int64(len(r.Addrs)); id++ {
				out[i].Addrs = append(out[i].Addrs, r.Addrs[id])
			}
		}
		return out
	}
}

// kafkaCluster describes the cluster to Kafka clients (nil on a single
// node).
func (n *Node) kafkaCluster() func() *kafka.ClusterView {
	m := n.Member
	if m == nil {
		return nil
	}
	return func() *kafka.ClusterView {
		// The members as they are now (they join and leave).
		members := m.Members()
		hosts := make(map[int32]string, len(members))
		for _, id := range placement.SortedIDs(members) {
			hosts[int32(id)] = members[id]
		}
		groups := m.Groups()
		// Each group's replicas start with its preferred leader (Kafka's
		// preferred replica), the member it returns to.
		replicas := make([][]int32, len(groups))
		for g := range groups {
			for _, id := range placement.Voters(members, model.GroupID(g), m.FactorOf(model.GroupID(g))) {
				replicas[g] = append(replicas[g], int32(id))
			}
		}
		v := &kafka.ClusterView{Hosts: hosts, Groups: make([]kafka.GroupView, len(groups))}
		for g, gr := range groups {
			var st replication.Status
			if r := gr.Hosted(); r != nil {
				st = r.Raft.Status()
			} else {
				leader, tm := gr.Leader()
				st.Leader, st.Term = leader, uint64(tm)
			}
			// The leader's epoch is its Raft term's (the term a follower
			// knows once it hears from the leader).
			gv := kafka.GroupView{Leader: int32(st.Leader), Epoch: int32(model.Term(st.Term).LeaderEpoch()), Replicas: replicas[g]}
			if st.Leader == 0 {
				gv.Leader, gv.Epoch = -1, -1
			} else if _, ok := hosts[int32(st.Leader)]; !ok {
				// A member that left still leads the group until it
				// hands it off: clients reach it where it was.
				if h, known := m.HostOf(st.Leader); known {
					hosts[int32(st.Leader)] = h
				} else {
					gv.Leader, gv.Epoch = -1, -1
				}
			}
			// In sync: the voters the leader heard from within the
			// failure-detection time that hold everything committed (within
			// a batch in flight) — its own view on the leader, the set it
			// published elsewhere; every replica while neither is known.
			if isr, ok := gr.InSync(); ok {
				for _, id := range isr {
					gv.ISR = append(gv.ISR, int32(id))
				}
			}
			switch {
			case len(gv.ISR) > 0:
			case st.Leader != 0 && st.Leader != m.Self():
				gv.ISR = replicas[g]
			default:
				gv.ISR = []int32{int32(m.Self())}
			}
			v.Groups[g] = gv
		}
		return v
	}
}

// inSyncCount counts a group's in-sync voters; nil on a single node.
func (n *Node) inSyncCount() func(group int) (int, bool) {
	if n.Member == nil {
		return nil
	}
	return func(group int) (int, bool) {
		groups := n.Member.Groups()
		if group < 0 || group >= len(groups) {
			return 0, false
		}
		isr, ok := groups[group].InSync()
		return len(isr), ok
	}
}

// electLeader moves a group's leadership to a node (Kafka's preferred
// leader election); nil on a single node.
func (n *Node) electLeader() func(ctx context.Context, group int, node int32) error {
	if n.Member == nil {
		return nil
	}
	return func(ctx context.Context, group int, node int32) error {
		return n.Member.Elect(ctx, group, model.NodeID(node))
	}
}

// relayedAdvertise points RocketMQ clients that reached the leader through
// another member's relay back at that member (its host, the same port):
// their routes then keep working when leadership moves, since the member
// relays to whichever node leads, and remoting clients refresh routes only
// every 30 s. Nil on a single node and with several groups, whose routes
// name each group's leader and other members (brokerRoutes): a client
// whose broker fails retries another broker.
func (n *Node) relayedAdvertise() func(local, remote net.Addr) string {
	m := n.Member
	if m == nil || len(m.Groups()) > 1 {
		return nil
	}
	isMember := func(host string) bool {
		for id, h := range m.Members() {
			if id != m.Self() && h == host {
				return true
			}
		}
		return false
	}
	return func(local, remote net.Addr) string {
		rh, _, err := net.SplitHostPort(remote.String())
		if err != nil || !isMember(rh) {
			return ""
		}
		_, port, err := net.SplitHostPort(local.String())
		if err != nil {
			return ""
		}
		return net.JoinHostPort(rh, port)
	}
}
