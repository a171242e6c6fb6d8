package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rosettamq/rosetta/internal/member/directory"
	"github.com/rosettamq/rosetta/internal/member/image"
	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/member/relay"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/meta/etcdembed"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Config is what a member is made with (the cluster section of the
// configuration, resolved).
type Config struct {
	Self    model.NodeID
	DataDir string
	// Cluster is cluster.name: the metadata prefix, the etcd cluster token
	// and the replication transport's identity.
	Cluster string
	// Members are the members as cluster.members names them (the recorded
	// list holds once the cluster is made).
	Members placement.Members
	// EtcdEndpoints name an external etcd (none: the members' embedded one,
	// on EtcdPort and the next port).
	EtcdEndpoints     []string
	EtcdPort          int
	RaftPort          int
	Secret            string
	TLS               bool
	Groups            int // cluster.groups (0: as the cluster was made)
	MaxGroups         int
	ReplicationFactor int // cluster.replication_factor (0: as the cluster was made)
	Logger            *slog.Logger
	// Clock drives the member's loops (nil: the wall clock).
	Clock Clock
	// CallErrors are the errors calls between members carry by name.
	CallErrors []peer.NamedError
	// Protocol makes a protocol-only node (NewProtocol): no etcd member,
	// no replica, every listener relayed to its group's leader.
	Protocol bool
	// NewState makes the state checkpointed with the log of group g > 0
	// (group 0's is the node's, given to Settle).
	NewState func(g model.GroupID) State
}

// State is what the composition root keeps checkpointed with a group's
// log (the idempotent-producer state), opaque to the member.
type State interface {
	Keepers() []storage.StateKeeper
}

// Member is a cluster member: its etcd member, its replicas of the groups
// it hosts, the loops that serve a group while it leads it, and what it
// knows of the others.
type Member struct {
	cfg   Config
	log   *slog.Logger
	clock Clock

	dir   *directory.Directory
	store meta.Store
	etcd  *etcdembed.Embedded
	// protocolHost is a protocol-only node's host ("" for a member).
	protocolHost string
	// protocol follows the registered protocol-only nodes (members).
	protocol protocolFollower
	// etcdClients are the client URLs of the cluster's etcd members when
	// this member runs none (a member past placement.EtcdMembers).
	etcdClients []string
	pki         *clusterPKI // the embedded etcd's certificates (cluster.tls)
	transport   *replication.TCPTransport
	peers       *peer.Peers
	groupsMu    sync.RWMutex
	groups      []*Group // by group id; groups added while running are appended
	added       []AddedGroup
	served      atomic.Int32 // how many groups the Server knows (servedGroups)
	factor      int
	// kafkaRelays are the Kafka connections relayed to group 0's leader
	// while this member leads no group.
	kafkaRelays relay.Set
	// engineBase is the storage configuration group engines open with;
	// opened holds the replicas whose engines opened as the member
	// started, until Start starts them.
	engineBase storage.Config
	opened     map[model.GroupID]*Replica
}

// New prepares member cfg.Self: it starts the embedded etcd member
// (unless the cluster uses an external etcd) and sets sc, the node's
// storage configuration (group 0's engine), up as a replica. It runs
// before the metadata store and the node's engine open.
func New(ctx context.Context, cfg Config, sc *storage.Config) (*Member, error) {
	if cfg.Clock == nil {
		cfg.Clock = WallClock{}
	}
	m := &Member{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, dir: directory.New(nil, cfg.Self, cfg.Members)}
	// Group 0 now; the others once the metadata says how many there are
	// (Settle).
	m.groups = append(m.groups, &Group{id: 0, dir: m.dir})
	m.dir.SetGroups(1)
	g0 := &Replica{handoff: replication.NewHandoff()}
	m.opened = map[model.GroupID]*Replica{0: g0}
	sc.Replicated = true
	sc.OnWritten = g0.handoff.Written
	if len(cfg.EtcdEndpoints) > 0 {
		return m, nil
	}
	scheme := m.etcdScheme()
	var err error
	if cfg.TLS {
		if m.pki, err = makeClusterPKI(filepath.Join(cfg.DataDir, "cluster-tls"), cfg.Cluster, cfg.Secret, cfg.Members[cfg.Self]); err != nil {
			return nil, err
		}
	}
	if err := checkEtcdScheme(filepath.Join(cfg.DataDir, "etcd"), scheme); err != nil {
		return nil, err
	}
	initial := map[string]string{}
	for _, id := range placement.EtcdVoters(cfg.Members) {
		initial[fmt.Sprintf("node-%d", id)] = m.etcdPeerURL(cfg.Members[id])
	}
	host := cfg.Members[cfg.Self]
	var peers []string
	for _, id := range placement.SortedIDs(cfg.Members) {
		if id != cfg.Self {
			peers = append(peers, m.etcdClientURL(cfg.Members[id]))
		}
	}
	runs, asked := m.runsEtcd(ctx, peers)
	if !runs {
		m.log.Info("this member is an etcd client: the cluster's etcd has its members", "endpoints", m.etcdClients)
		return m, nil
	}
	m.log.Info("starting the embedded etcd member", "members", len(cfg.Members))
	m.etcd, err = etcdembed.StartEmbedded(ctx, etcdembed.EmbeddedConfig{
		Name:           fmt.Sprintf("node-%d", cfg.Self),
		Dir:            filepath.Join(cfg.DataDir, "etcd"),
		ClientURL:      m.etcdClientURL(host),
		PeerURL:        m.etcdPeerURL(host),
		InitialCluster: initial,
		ClusterToken:   cfg.Cluster,
		TLSCA:          m.pki.ca(),
		TLSCert:        m.pki.cert(),
		TLSKey:         m.pki.key(),
		Logger:         m.log,
		Peers:          peers,
		ClientTLS:      m.EtcdTLS(),
		Asked:          asked,
	})
	return m, err
}

// runsEtcd decides whether this member runs an embedded etcd member: it
// does when it ran one before (its etcd directory holds a member), when
// the running cluster's etcd lists it (added as a learner), or, while no
// etcd answers (the cluster is being made), when it is one of the
// placement.EtcdMembers lowest ids. Otherwise it is an etcd client of the
// members that run one (m.etcdClients). It returns what the other members
// answered when it asked them (nil when it did not).
func (m *Member) runsEtcd(ctx context.Context, peers []string) (bool, *etcdembed.PeersAnswer) {
	if _, err := os.Stat(filepath.Join(m.cfg.DataDir, "etcd", "member")); err == nil {
		return true, nil
	}
	list, ok := etcdembed.ListMembers(ctx, peers, m.EtcdTLS())
	asked := &etcdembed.PeersAnswer{Members: list, Answered: ok}
	if ok {
		if etcdembed.Listed(list, m.etcdPeerURL(m.cfg.Members[m.cfg.Self])) {
			return true, asked
		}
		m.etcdClients = etcdembed.ClientURLs(list)
		return len(m.etcdClients) == 0, asked // a cluster of learners only: it joins as before
	}
	voters := placement.EtcdVoters(m.cfg.Members)
	if slices.Contains(voters, m.cfg.Self) {
		return true, asked
	}
	for _, id := range voters {
		m.etcdClients = append(m.etcdClients, m.etcdClientURL(m.cfg.Members[id]))
	}
	return false, asked
}

// etcdScheme is the scheme of the embedded etcd members' URLs: https with
// cluster.tls (certificates from the cluster secret), http otherwise.
func (m *Member) etcdScheme() string {
	if m.cfg.TLS {
		return "https"
	}
	return "http"
}

// etcdClientURL and etcdPeerURL are the embedded etcd URLs of a member on
// host.
func (m *Member) etcdClientURL(host string) string {
	return m.etcdScheme() + "://" + net.JoinHostPort(host, strconv.Itoa(m.cfg.EtcdPort))
}

func (m *Member) etcdPeerURL(host string) string {
	return m.etcdScheme() + "://" + net.JoinHostPort(host, strconv.Itoa(m.cfg.EtcdPort+1))
}

// EtcdTLS is the etcd client's TLS (the members' embedded etcd with
// cluster.tls), nil otherwise.
func (m *Member) EtcdTLS() *tls.Config {
	if m == nil || m.pki == nil {
		return nil
	}
	return m.pki.client
}

// RunsEtcd reports whether this member runs an embedded etcd member (false
// for an etcd client: a member past the fifth, or an external etcd).
func (m *Member) RunsEtcd() bool { return m != nil && m.etcd != nil }

// EtcdEndpoints are the client URLs of the cluster's etcd: the external
// one, or the members' embedded etcd.
func (m *Member) EtcdEndpoints() []string {
	if len(m.cfg.EtcdEndpoints) > 0 {
		return m.cfg.EtcdEndpoints
	}
	if m.etcd == nil && len(m.etcdClients) > 0 {
		return m.etcdClients
	}
	var out []string
	for _, id := range placement.SortedIDs(m.cfg.Members) {
		out = append(out, m.etcdClientURL(m.cfg.Members[id]))
	}
	return out
}

// InstallImage installs the image of group g fetched before the last stop
// in its engine directory dir (before the engine opens).
func (m *Member) InstallImage(dir string, g model.GroupID) error {
	ok, err := image.Install(dir, g, m.log)
	if gr := m.group(g); ok && gr != nil {
		gr.imagesInstalled.Add(1)
	}
	return err
}

// Settle reads the cluster's records once the metadata store and the
// node's engine (group 0's, with its state) are open: the members, the
// number of groups and the replication factor as the cluster was made
// (recording them for a cluster being made); then it opens the engines of
// the other groups it hosts, over base.
func (m *Member) Settle(ctx context.Context, store meta.Store, engine *storage.Engine, state State, base storage.Config) error {
	m.store = store
	m.dir.SetStore(store)
	changed, err := m.dir.ResolveMembers(ctx, m.cfg.Cluster)
	if err != nil {
		return err
	}
	if changed {
		m.log.Info("the cluster's members differ from cluster.members; the cluster's record holds", "members", directory.FormatMembers(m.Members()))
	}
	if err := m.resolveGroups(ctx); err != nil {
		return err
	}
	if err := m.resolveReplicationFactor(ctx); err != nil {
		return err
	}
	g0 := m.opened[0]
	g0.Engine, g0.State = engine, state
	return m.hostedEngines(ctx, base)
}

// Start connects to the other members and starts the member's replicas
// of the groups it hosts; calls registers the composition root's call
// handlers before any call is answered.
func (m *Member) Start(ctx context.Context, calls func(*peer.Peers)) error {
	peers := map[model.NodeID]string{}
	for id, host := range m.Members() {
		peers[id] = net.JoinHostPort(host, strconv.Itoa(m.cfg.RaftPort))
	}
	t, err := replication.NewTCPTransport(replication.TCPConfig{Cluster: m.cfg.Cluster, Node: m.cfg.Self,
		Listen: peers[m.cfg.Self], Peers: peers, LocalHost: m.dir.SelfHost(), Secret: m.cfg.Secret, TLS: m.cfg.TLS, Logger: m.log})
	if err != nil {
		return err
	}
	m.transport = t
	m.peers = peer.New(t, m.cfg.Self, func(g int) model.NodeID {
		gr := m.group(model.GroupID(g))
		if gr == nil {
			return 0
		}
		leader, _ := gr.Leader()
		return leader
	}, m.cfg.CallErrors)
	image.NewServer(m.peers, m.cfg.Self, func(g int) *replication.Group {
		gr := m.group(model.GroupID(g))
		if gr == nil {
			return nil
		}
		if r := gr.Hosted(); r != nil {
			return r.Raft
		}
		return nil
	}, func(g int) {
		if gr := m.group(model.GroupID(g)); gr != nil {
			gr.imagesServed.Add(1)
		}
	}, m.log)
	peer.Handle(m.peers, peer.Elect, m.answerElect)
	if calls != nil {
		calls(m.peers)
	}
	for _, gr := range m.Groups() {
		r := m.opened[gr.id]
		if r == nil {
			continue
		}
		if err := m.startReplica(ctx, gr, r); err != nil {
			m.Stop()
			m.transport = nil
			return err
		}
	}
	m.opened = nil
	return nil
}

// Stop stops the replicas and the transport (the engines stay open) and
// closes every relayed connection.
func (m *Member) Stop() {
	for _, gr := range m.Groups() {
		if r := gr.Hosted(); r != nil {
			r.Raft.Stop()
		}
	}
	if m.transport != nil {
		m.transport.Close()
	}
	for _, gr := range m.Groups() {
		gr.relays.CloseAll()
	}
	m.kafkaRelays.CloseAll()
}

// CloseEngines closes the engines of groups 1.. (group 0's is the node's).
func (m *Member) CloseEngines() error {
	var errs []error
	for _, gr := range m.Groups()[1:] {
		if r := gr.Hosted(); r != nil {
			errs = append(errs, r.Engine.Close())
		}
	}
	for g, r := range m.opened { // opened but never started
		if g != 0 && r.Engine != nil {
			errs = append(errs, r.Engine.Close())
		}
	}
	return errors.Join(errs...)
}

// CloseEtcd stops the embedded etcd member.
func (m *Member) CloseEtcd() {
	if m.etcd != nil {
		m.etcd.Close()
	}
}

// Self is this member's id.
func (m *Member) Self() model.NodeID { return m.cfg.Self }

// Members returns the cluster's members by id (do not modify).
func (m *Member) Members() placement.Members { return m.dir.Members() }

// HostOf is the host of node id: a member's, or one that left ("" and
// false for a node never known).
func (m *Member) HostOf(id model.NodeID) (string, bool) { return m.dir.HostOf(id) }

// Groups are the cluster's replication groups, by id (groups added while
// it runs come at the end).
func (m *Member) Groups() []*Group {
	m.groupsMu.RLock()
	defer m.groupsMu.RUnlock()
	return m.groups[:len(m.groups):len(m.groups)]
}

// group is group g (nil for no such group).
func (m *Member) group(g model.GroupID) *Group {
	m.groupsMu.RLock()
	defer m.groupsMu.RUnlock()
	if g < 0 || int(g) >= len(m.groups) {
		return nil
	}
	return m.groups[g]
}

// Factor is the cluster's replication factor.
func (m *Member) Factor() int { return m.factor }

// Placed is group g's placement over the cluster's members now.
func (m *Member) Placed(g model.GroupID) []model.NodeID {
	return placement.Voters(m.Members(), g, m.FactorOf(g))
}

// Peers makes and answers calls between members.
func (m *Member) Peers() *peer.Peers { return m.peers }

// KafkaRelays are the Kafka connections relayed to group 0's leader while
// this member leads no group.
func (m *Member) KafkaRelays() *relay.Set { return &m.kafkaRelays }

// Relayer relays the member's client connections to the groups' leaders.
func (m *Member) Relayer() *relay.Relayer {
	return &relay.Relayer{Self: m.cfg.Self, LocalHost: m.localHost, HostOf: m.dir.HostOf, Log: m.log}
}

// LeaderHost returns the node leading group 0 and its host ("" while none
// is known).
func (m *Member) LeaderHost() (model.NodeID, string) {
	l, _ := m.group(0).Leader()
	if l == 0 {
		return 0, ""
	}
	h, _ := m.HostOf(l)
	return l, h
}
