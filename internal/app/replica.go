package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/meta/etcdembed"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
)

// A cluster member (cluster.members): every member runs an etcd member for
// the metadata (unless cluster.etcd_endpoints names an external etcd) and
// a replica of each replication group its placement names (cluster.groups;
// one per member by default; hosting.go), each replicated with Raft. The member that leads a group serves its
// clients: it builds the group's broker from the log (as a restart does)
// when it becomes leader and drops it when leadership ends. The others
// accept clients on the same ports and relay each connection to the
// leader's same port, so any member's address works for every client.
// When leadership moves, a connection on which nothing was answered yet
// moves to the new leader (relay.go, clientconn.go); the others close,
// and clients reconnect. Group 0 serves every listener; groups 1.. are
// further RocketMQ brokers on the remoting and gRPC ports + g.

// replica is the node's replica of the log and what runs with it.
type replica struct {
	// hosts: the cluster's members by id (as recorded in the metadata,
	// members.go), replaced whole when one joins or leaves.
	hosts     atomic.Pointer[map[model.NodeID]string]
	known     atomic.Pointer[map[model.NodeID]string] // every host ever a member's (hostOf)
	hostsMu   sync.Mutex                              // serialises setMembers
	self      model.NodeID
	etcd      *etcdembed.Embedded
	transport *replication.TCPTransport
	groups    []*groupReplica // by group id
	pki       *clusterPKI     // the embedded etcd's certificates (cluster.tls)
	// kafkaRelays are the Kafka connections relayed to group 0's leader
	// while this member leads no group (kafkafront.go).
	kafkaRelays relaySet
	// images are the engine images this member serves to replicas
	// fetching a snapshot (snapshots.go).
	images imageLeases
	// engineBase is the storage configuration group engines open with;
	// opened holds the replicas whose engines opened as the member
	// started, until startReplica starts them.
	engineBase storage.Config
	opened     map[model.GroupID]*localReplica
	// factor is the cluster's replication factor: the voters of each
	// group but group 0 on a cluster of more members.
	factor int
}

// first is group 0, which serves every listener.
func (r *replica) first() *groupReplica { return r.groups[0] }

// replicated says whether the node is a member of a replicated cluster.
func (a *App) replicated() bool { return a.cfg.Cluster.Members != "" }

// sortedIDs returns the ids of members in order.
func sortedIDs(members map[model.NodeID]string) []model.NodeID {
	ids := make([]model.NodeID, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// prepareReplica starts the embedded etcd member (unless the cluster uses
// an external etcd) and sets the engine up as a replica. It runs before
// the metadata store and the engine open.
func (a *App) prepareReplica(ctx context.Context, sc *storage.Config) error {
	members, err := a.cfg.Cluster.members()
	if err != nil {
		return err
	}
	r := &replica{self: model.NodeID(a.cfg.NodeID)}
	r.setMembers(members)
	// Group 0 now; the others once the metadata says how many there are
	// (resolveGroups).
	r.groups = append(r.groups, &groupReplica{id: 0, stack: &a.stack})
	g0 := &localReplica{handoff: replication.NewHandoff()}
	r.opened = map[model.GroupID]*localReplica{0: g0}
	a.replica = r
	sc.Replicated = true
	sc.OnWritten = g0.handoff.Written
	if a.cfg.Cluster.EtcdEndpoints != "" {
		return nil
	}
	scheme := a.etcdScheme()
	if a.cfg.Cluster.TLS {
		if r.pki, err = makeClusterPKI(filepath.Join(a.cfg.DataDir, "cluster-tls"), a.cfg.Cluster.Name, a.cfg.Cluster.Secret, members[r.self]); err != nil {
			return err
		}
	}
	peerURL := func(host string) string {
		return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.EtcdPort+1))
	}
	initial := map[string]string{}
	for id, host := range members {
		initial[fmt.Sprintf("node-%d", id)] = peerURL(host)
	}
	host := members[r.self]
	var peers []string
	for _, id := range sortedIDs(members) {
		if id != r.self {
			peers = append(peers, scheme+"://"+net.JoinHostPort(members[id], strconv.Itoa(a.cfg.Cluster.EtcdPort)))
		}
	}
	if err := checkEtcdScheme(filepath.Join(a.cfg.DataDir, "etcd"), scheme); err != nil {
		return err
	}
	a.log.Info("starting the embedded etcd member", "members", len(members))
	r.etcd, err = etcdembed.StartEmbedded(ctx, etcdembed.EmbeddedConfig{
		Name:           fmt.Sprintf("node-%d", r.self),
		Dir:            filepath.Join(a.cfg.DataDir, "etcd"),
		ClientURL:      scheme + "://" + net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.EtcdPort)),
		PeerURL:        peerURL(host),
		InitialCluster: initial,
		ClusterToken:   a.cfg.Cluster.Name,
		TLSCA:          r.pki.ca(),
		TLSCert:        r.pki.cert(),
		TLSKey:         r.pki.key(),
		Logger:         a.log,
		Peers:          peers,
		ClientTLS:      a.etcdTLS(),
	})
	return err
}

// startReplica connects to the other members and starts the node's
// replicas of the groups it hosts.
func (a *App) startReplica(ctx context.Context) error {
	r := a.replica
	peers := map[model.NodeID]string{}
	for id, host := range r.members() {
		peers[id] = net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.RaftPort))
	}
	t, err := replication.NewTCPTransport(replication.TCPConfig{Cluster: a.cfg.Cluster.Name, Node: r.self,
		Listen: peers[r.self], Peers: peers, LocalHost: r.members()[r.self], Secret: a.cfg.Cluster.Secret, TLS: a.cfg.Cluster.TLS, Logger: a.log})
	if err != nil {
		return err
	}
	r.transport = t
	t.HandleCalls(a.answerCall)
	for _, gr := range r.groups {
		lr := r.opened[gr.id]
		if lr == nil {
			continue
		}
		if err := a.startGroupReplica(ctx, gr, lr); err != nil {
			r.stop()
			r.transport = nil
			return err
		}
	}
	r.opened = nil
	a.metrics.Registry.MustRegister(newReplicaCollector(r))
	return nil
}

// stop stops the replica (the engines stay open).
func (r *replica) stop() {
	for _, gr := range r.groups {
		if lr := gr.hosted(); lr != nil {
			lr.raft.Stop()
		}
	}
	if r.transport != nil {
		r.transport.Close()
	}
	for _, gr := range r.groups {
		gr.relays.closeAll()
	}
	r.kafkaRelays.closeAll()
}

// closeEngines closes the engines of groups 1.. (group 0's is the node's).
func (r *replica) closeEngines() error {
	var errs []error
	for _, gr := range r.groups[1:] {
		if lr := gr.hosted(); lr != nil {
			errs = append(errs, lr.engine.Close())
		}
	}
	for g, lr := range r.opened { // opened but never started
		if g != 0 {
			errs = append(errs, lr.engine.Close())
		}
	}
	return errors.Join(errs...)
}

func (r *replica) closeEtcd() {
	if r.etcd != nil {
		r.etcd.Close()
	}
}

// leaderHost returns the host of the node leading group 0 ("" while none
// is known).
func (r *replica) leaderHost() (model.NodeID, string) {
	l, _ := r.first().leader()
	if l == 0 {
		return 0, ""
	}
	h, _ := r.hostOf(l)
	return l, h
}

// kafkaCluster describes the cluster to Kafka clients (nil on a single
// node).
func (a *App) kafkaCluster() func() *kafka.ClusterView {
	r := a.replica
	if r == nil {
		return nil
	}
	return func() *kafka.ClusterView {
		// The members as they are now (they join and leave).
		m := r.members()
		hosts := make(map[int32]string, len(m))
		ids := sortedIDs(m)
		for _, id := range ids {
			hosts[int32(id)] = m[id]
		}
		// Each group's replicas start with its preferred leader (Kafka's
		// preferred replica), the member it returns to.
		replicas := make([][]int32, len(r.groups))
		for g := range r.groups {
			for _, id := range groupVoters(m, model.GroupID(g), r.factor) {
				replicas[g] = append(replicas[g], int32(id))
			}
		}
		v := &kafka.ClusterView{Hosts: hosts, Groups: make([]kafka.GroupView, len(r.groups))}
		for g, gr := range r.groups {
			var st replication.Status
			if lr := gr.hosted(); lr != nil {
				st = lr.raft.Status()
			} else {
				leader, tm := gr.leader()
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
				if h, known := r.hostOf(st.Leader); known {
					hosts[int32(st.Leader)] = h
				} else {
					gv.Leader, gv.Epoch = -1, -1
				}
			}
			// In sync: the replicas the leader knows hold everything
			// committed (within a small margin: a batch in flight). A
			// follower does not know the others' progress: it names every
			// replica while the group has a leader.
			for _, p := range st.Replicas {
				if p.Lag <= 1024 {
					gv.ISR = append(gv.ISR, int32(p.Node))
				}
			}
			switch {
			case len(gv.ISR) > 0:
			case st.Leader != 0 && st.Leader != r.self:
				gv.ISR = replicas[g]
			default:
				gv.ISR = []int32{int32(r.self)}
			}
			v.Groups[g] = gv
		}
		return v
	}
}

// electLeader moves a group's leadership to a node (Kafka's preferred
// leader election); nil on a single node.
func (a *App) electLeader() func(ctx context.Context, group int, node int32) error {
	r := a.replica
	if r == nil {
		return nil
	}
	return func(ctx context.Context, group int, node int32) error {
		if _, ok := r.members()[model.NodeID(node)]; !ok {
			return fmt.Errorf("no member %d", node)
		}
		if group < 0 || group >= len(r.groups) {
			return fmt.Errorf("no group %d", group)
		}
		// The group's leader hands it off (here, or over the transport).
		return a.callGroup(ctx, group, callElect, callRequest{Node: model.NodeID(node)})
	}
}

// relayedAdvertise points RocketMQ clients that reached the leader through
// another member's relay back at that member (its host, the same port):
// their routes then keep working when leadership moves, since the member
// relays to whichever node leads, and remoting clients refresh routes only
// every 30 s. Nil on a single node and with several groups, whose routes
// name each group's leader and other members (brokerRoutes): a client
// whose broker fails retries another broker.
func (a *App) relayedAdvertise() func(local, remote net.Addr) string {
	r := a.replica
	if r == nil || len(r.groups) > 1 {
		return nil
	}
	member := func(host string) bool {
		for id, h := range r.members() {
			if id != r.self && h == host {
				return true
			}
		}
		return false
	}
	return func(local, remote net.Addr) string {
		rh, _, err := net.SplitHostPort(remote.String())
		if err != nil || !member(rh) {
			return ""
		}
		_, port, err := net.SplitHostPort(local.String())
		if err != nil {
			return ""
		}
		return net.JoinHostPort(rh, port)
	}
}
