package member

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/member/directory"
	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/meta/etcdembed"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// Protocol-only nodes. A node started with Config.Protocol joins a cluster
// without an etcd member or any replica: it is a client of the members'
// etcd, follows the recorded members, the groups (also those added while
// it runs) and their published leaders, registers itself (cluster.Node
// with cluster.RoleProtocol and its host), and its listeners relay every
// connection to the leader of the listener's group, from its own host.
// The members follow the registered protocol nodes (protocolFollower):
// they know a connection relayed by one from its address, and answer it
// with routes naming the protocol nodes instead of the members.

// NewProtocol prepares protocol-only node cfg.Self on host: it finds the
// cluster's etcd (cluster.etcd_endpoints, else the members' embedded one).
// It runs before the metadata store opens.
func NewProtocol(ctx context.Context, cfg Config, host string) (*Member, error) {
	if cfg.Clock == nil {
		cfg.Clock = WallClock{}
	}
	if _, ok := cfg.Members[cfg.Self]; ok {
		return nil, fmt.Errorf("%w: node %d is a member in cluster.members; a protocol-only node needs an id of its own", model.ErrInvalidConfig, cfg.Self)
	}
	if err := refuseMemberData(cfg.DataDir); err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, dir: directory.New(nil, cfg.Self, cfg.Members), protocolHost: host}
	m.groups = append(m.groups, &Group{id: 0, dir: m.dir})
	m.dir.SetGroups(1)
	if len(cfg.EtcdEndpoints) > 0 {
		return m, nil
	}
	var err error
	if cfg.TLS {
		if m.pki, err = makeClusterPKI(filepath.Join(cfg.DataDir, "cluster-tls"), cfg.Cluster, cfg.Secret, host); err != nil {
			return nil, err
		}
	}
	var peers []string
	for _, id := range placement.SortedIDs(cfg.Members) {
		peers = append(peers, m.etcdClientURL(cfg.Members[id]))
	}
	if list, ok := etcdembed.ListMembers(ctx, peers, m.EtcdTLS()); ok {
		m.etcdClients = etcdembed.ClientURLs(list)
	}
	if len(m.etcdClients) == 0 {
		for _, id := range placement.EtcdVoters(cfg.Members) {
			m.etcdClients = append(m.etcdClients, m.etcdClientURL(cfg.Members[id]))
		}
	}
	return m, nil
}

// refuseMemberData refuses a data directory holding a member's data: a
// protocol-only node started on it would leave a member's replicas and
// etcd member behind unused (the member was meant to run there).
func refuseMemberData(dir string) error {
	for _, sub := range []string{"storage", "groups", "etcd", "raft"} {
		if fileExists(filepath.Join(dir, sub)) {
			return fmt.Errorf("%w: %s holds a member's data (%s); a protocol-only node holds none: give it a directory of its own",
				model.ErrInvalidConfig, dir, sub)
		}
	}
	return nil
}

// protocolWait bounds how long a protocol-only node waits for its cluster
// to be made.
const protocolWait = 2 * time.Minute

// Protocol reports whether this is a protocol-only node.
func (m *Member) Protocol() bool { return m.cfg.Protocol }

// OpenProtocol reads what a protocol-only node needs of the cluster's
// records once the metadata store is open: the members, the groups and
// the replication factor, all recorded when the cluster was made.
func (m *Member) OpenProtocol(ctx context.Context, store meta.Store) error {
	m.store = store
	m.dir.SetStore(store)
	// A protocol-only node started with the members waits for them to
	// make the cluster.
	for deadline, logged := time.Now().Add(protocolWait), false; ; {
		_, err := store.Get(ctx, groupsKey)
		if err == nil {
			break
		}
		if !errors.Is(err, meta.ErrNotFound) && !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
			return fmt.Errorf("%w: cluster %q is not made (its members record it as they first start): %w", model.ErrInvalidConfig, m.cfg.Cluster, err)
		}
		if !logged {
			m.log.Info("waiting for the cluster's members to make it", "cluster", m.cfg.Cluster)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.clock.After(500 * time.Millisecond):
		}
	}
	if err := m.dir.LoadMembers(ctx); err != nil {
		return err
	}
	m.cfg.Groups = 0
	if err := m.resolveGroups(ctx); err != nil {
		return err
	}
	return m.resolveReplicationFactor(ctx)
}

// StartProtocol connects a protocol-only node to the members over the
// replication transport, which carries its calls to the groups' leaders
// (Peers); it answers none itself.
func (m *Member) StartProtocol() error {
	peers := map[model.NodeID]string{}
	for id, host := range m.Members() {
		peers[id] = net.JoinHostPort(host, strconv.Itoa(m.cfg.RaftPort))
	}
	t, err := replication.NewTCPTransport(replication.TCPConfig{Cluster: m.cfg.Cluster, Node: m.cfg.Self,
		Listen: net.JoinHostPort(m.protocolHost, strconv.Itoa(m.cfg.RaftPort)), Peers: peers, LocalHost: m.protocolHost,
		Secret: m.cfg.Secret, TLS: m.cfg.TLS, Logger: m.log})
	if err != nil {
		return err
	}
	m.transport = t
	m.peers = peer.New(t, m.cfg.Self, func(g int) model.NodeID {
		if gr := m.group(model.GroupID(g)); gr != nil {
			leader, _ := gr.Leader()
			return leader
		}
		return 0
	}, m.cfg.CallErrors)
	return nil
}

// RunProtocol runs a protocol-only node until ctx ends: it follows the
// recorded members, the groups added (grown is told of each new one) and
// the groups' published leaders (a relayed connection whose group's leader
// changed follows it).
func (m *Member) RunProtocol(ctx context.Context, grown func([]*Group)) error {
	m.served.Store(int32(len(m.Groups())))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		m.dir.WatchMembers(gctx, membershipInterval, func(cur, next placement.Members) {
			for id, host := range next {
				if cur[id] != host {
					m.transport.AddPeer(id, net.JoinHostPort(host, strconv.Itoa(m.cfg.RaftPort)))
				}
			}
			for id := range cur {
				if _, ok := next[id]; !ok {
					m.transport.RemovePeer(id)
				}
			}
			m.log.Info("the cluster's members changed", "members", directory.FormatMembers(next))
		})
		return nil
	})
	g.Go(func() error { m.followProtocolNodes(gctx); return nil })
	g.Go(func() error { m.followGroups(gctx, grown); return nil })
	g.Go(func() error {
		m.dir.WatchLeaders(gctx, membershipInterval, func(id model.GroupID) {
			if gr := m.group(id); gr != nil {
				leader, term := gr.Leader()
				m.log.Info("group leader", "group", id, "leader", leader, "term", term)
				gr.relays.CloseUpstreams()
			}
		})
		return nil
	})
	return g.Wait()
}

// localHost is the host this node's connections to other nodes come from:
// a member's own, a protocol-only node's.
func (m *Member) localHost() string {
	if m.cfg.Protocol {
		return m.protocolHost
	}
	return m.dir.SelfHost()
}

// protocolFollower keeps the registered protocol-only nodes' hosts.
type protocolFollower struct {
	hosts atomic.Pointer[map[string]model.NodeID]
}

// followProtocolNodes follows the protocol-only nodes registered in the
// cluster until ctx ends.
func (m *Member) followProtocolNodes(ctx context.Context) {
	for {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		nodes, err := cluster.Nodes(lctx, m.store)
		cancel()
		if err == nil {
			hosts := map[string]model.NodeID{}
			for _, n := range nodes {
				if n.Role == cluster.RoleProtocol && n.Host != "" {
					hosts[n.Host] = n.ID
				}
			}
			if cur := m.protocol.hosts.Load(); cur == nil || !maps.Equal(*cur, hosts) {
				m.connectProtocolNodes(cur, hosts)
				m.protocol.hosts.Store(&hosts)
				m.log.Info("protocol-only nodes", "nodes", hosts)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(time.Second):
		}
	}
}

// connectProtocolNodes keeps the transport connected to the registered
// protocol-only nodes (they call the groups' leaders over it): from cur to
// next, both by host.
func (m *Member) connectProtocolNodes(cur *map[string]model.NodeID, next map[string]model.NodeID) {
	if m.transport == nil || m.cfg.Protocol {
		return
	}
	members := m.Members()
	for host, id := range next {
		if _, member := members[id]; !member && id != m.cfg.Self {
			m.transport.AddPeer(id, net.JoinHostPort(host, strconv.Itoa(m.cfg.RaftPort)))
		}
	}
	if cur == nil {
		return
	}
	for host, id := range *cur {
		if _, member := members[id]; next[host] != id && !member && id != m.cfg.Self {
			m.transport.RemovePeer(id)
		}
	}
}

// ProtocolNodes are the registered protocol-only nodes by host.
func (m *Member) ProtocolNodes() map[string]model.NodeID {
	if h := m.protocol.hosts.Load(); h != nil {
		return *h
	}
	return nil
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
