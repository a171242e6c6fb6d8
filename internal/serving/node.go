// Package serving is what serves clients: a replication group's broker
// stack — the broker, the state machines applied from its log and the
// coordinators — and the protocol servers over it. A single node builds
// one stack and serves it for its whole life; a cluster member builds a
// group's stack each time its term starts (it is the member runtime's
// Server, see internal/member) and drops it when the term ends, while its
// listeners relay that group's clients to the leader:
//
//	                term starts                      term ends
//	relaying ──────────────────────► serving ─────────────────────► relaying
//	(member/relay)   Serve: stack      listeners → this term's    End: servers stop,
//	                 from the log,     servers; Kafka front-end    stack closes
//	                 servers start     answers for the group
//
// The package also answers what clients are told of a cluster (Kafka
// metadata, RocketMQ routes) and the calls members make about groups they
// lead (transactions across groups, the admin API of each group's leader).
// The composition root (internal/app) gives it its settings as option
// templates built from the configuration; each stack and server fills in
// what is its own.
package serving

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/grpcv5"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/mqtt"
	"github.com/rosettamq/rosetta/internal/pulsar"
	"github.com/rosettamq/rosetta/internal/remoting"
)

// Deps is what a Node serves with: the node's shared services and the
// option templates of what it builds.
type Deps struct {
	Log    *slog.Logger
	Meta   meta.Store
	Member *member.Member // nil on a single node
	// Groups is the number of replication groups the cluster was made
	// with (1 on a single node): consumer groups and transactional ids are
	// coordinated by one of them. Groups added later follow the member's.
	Groups int
	// OpenGroup opens the RocketMQ listeners of a group added while the
	// member runs (group g's on the remoting and gRPC ports + g).
	OpenGroup func(g int) ([]Endpoint, error)
	// ClusterName names the groups' RocketMQ brokers (<name>-<g>) when
	// there are several.
	ClusterName string

	// Option templates: each stack sets its placement, logger, state
	// sections and peers; each server its budget, cluster views, POP
	// engine and broker name.
	Broker      broker.Options
	Txn         txn.Options
	Pop         pop.Options
	Coordinator groups.Options
	Kafka       kafka.Options
	Remoting    remoting.Options
	GRPC        grpcv5.Options
	Pulsar      pulsar.Options
	MQTT        mqtt.Options

	Quotas   *quota.Manager
	Security admin.Security
	Metrics  *admin.Metrics
	// MaxBytesInFlight bounds the request bytes every front-end holds.
	MaxBytesInFlight int64
	// HTTPAddr is listen.http (the admin port every member shares).
	HTTPAddr string
	// BalanceQueues, when set, is how often group 0's leader moves a queue
	// from the group holding the most to the one holding the fewest
	// (balancer.go).
	BalanceQueues time.Duration
	// ShutdownTimeout bounds a member's graceful stop.
	ShutdownTimeout time.Duration

	// TLS wraps a listener per its TLS mode (closing it on failure).
	TLS func(name string, l net.Listener, mode string, alpn ...string) (net.Listener, error)
	// Addr is a listener's bound address by name ("grpc", "remoting").
	Addr func(listener string) string
	// ClusterID is the identity Kafka clients are told.
	ClusterID func() string
	// Cluster answers the admin API's cluster endpoints.
	Cluster admin.ClusterOps
	// Leave ends the node's registration before a member hands its
	// groups off (nil: nothing to end).
	Leave func()
}

// Node serves a node's clients: one stack on a single node, one per group
// it leads on a cluster member.
type Node struct {
	Deps
	log *slog.Logger
	// serving is what serves each group's clients while the node leads
	// it (a single node's one group: serving[0]); it grows as groups are
	// added.
	servingMu sync.RWMutex
	serving   []*groupServing
	// kafkaServer is a member's Kafka server, which also answers the
	// requests protocol-only nodes forward (nil until it is made).
	kafkaServer atomic.Pointer[kafka.Server]
	// movesMu serialises the queue moves group 0's leader drives.
	movesMu sync.Mutex
	// appends batches the appends its groups' brokers forward to the
	// groups their moved queues are in (elsewhere.go).
	appends appendBatcher
}

// NewNode returns a node serving nothing yet.
func NewNode(d Deps) *Node {
	n := &Node{Deps: d, log: d.Log}
	groups := max(d.Groups, 1)
	if d.Member != nil {
		groups = len(d.Member.Groups())
	}
	n.growServing(groups)
	return n
}

// growServing makes room to serve groups 0..to-1.
func (n *Node) growServing(to int) {
	n.servingMu.Lock()
	defer n.servingMu.Unlock()
	for len(n.serving) < to {
		n.serving = append(n.serving, &groupServing{stack: &atomic.Pointer[Stack]{}})
	}
}

// groupServing is what serves group g (nil for a group unknown here).
func (n *Node) groupServing(g int) *groupServing {
	n.servingMu.RLock()
	defer n.servingMu.RUnlock()
	if g < 0 || g >= len(n.serving) {
		return nil
	}
	return n.serving[g]
}

// groupCount is how many groups this node knows.
func (n *Node) groupCount() int {
	n.servingMu.RLock()
	defer n.servingMu.RUnlock()
	return len(n.serving)
}

// Stack is group g's stack while this node serves it (nil otherwise).
func (n *Node) Stack(g int) *Stack {
	if gs := n.groupServing(g); gs != nil {
		return gs.stack.Load()
	}
	return nil
}

// Start builds a single node's stack over parts (its engine holds every
// queue); RunSingle serves it.
func (n *Node) Start(ctx context.Context, parts Parts) error {
	st, err := n.NewStack(ctx, parts)
	if err != nil {
		return err
	}
	n.groupServing(0).stack.Store(st)
	return nil
}

// Close closes a single node's stack (nothing on a member, whose terms
// close theirs).
func (n *Node) Close() error {
	if st := n.groupServing(0).stack.Swap(nil); st != nil {
		return st.Close()
	}
	return nil
}
