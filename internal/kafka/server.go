package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/task"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

// Options configure the Kafka front-end.
type Options struct {
	// IdleTimeout closes a connection that sends nothing for this long;
	// FrameTimeout (plus a second per MiB) is how long a request has to
	// arrive whole once its first byte did (defaults when zero).
	IdleTimeout, FrameTimeout time.Duration
	NodeID                    int32
	AdvertisedAddr            string // host:port told to clients; empty: the address each client connected to
	// Cluster, when set (a cluster member), describes the other brokers
	// and the partitions' replicas; nil: a single node.
	Cluster func() *ClusterView
	// Tracer records produce and fetch spans (nil: none).
	Tracer *telemetry.Tracer
	// LeaderAck, in a cluster, answers acks=1 produces once the leader
	// wrote them; otherwise they wait for the commit, as acks=all does.
	LeaderAck bool
	// Elect, in a cluster, moves a replication group's leadership to node
	// (ElectLeaders with the preferred replica) and returns once it moved
	// or failed.
	Elect func(ctx context.Context, group int, node int32) error
	// InSync, in a cluster, counts a led replication group's in-sync
	// voters (false while its leader does not know yet); nil: one copy.
	InSync             func(group int) (int, bool)
	ClusterID          string
	MaxFrameBytes      int32
	MaxInflightPerConn int
	MaxBytesInFlight   int64
	// Budget, when set, is the request byte budget shared with other
	// front-ends (MaxBytesInFlight is then unused).
	Budget *task.ByteBudget
	// Groups is the number of replication groups the cluster was made
	// with: a consumer group or transactional id is coordinated by group
	// hash(id) mod Groups (groups added later coordinate none); 0 or 1: one,
	// a single node's. A partition's group is its topic's (broker.Topic's
	// table). Each group's stack is attached while this node leads it
	// (Attach).
	Groups int
	// LogCopy, for a cluster member, returns its own copy of group g's log
	// (nil when it holds none): Kafka's debugging replica id reads it for
	// partitions this member does not lead.
	LogCopy func(group int) *broker.LogCopy
	// Remote reaches the transaction coordinators of groups another
	// member leads (nil: a single node, or one group).
	Remote Remote
	// Security authenticates SASL listeners and authorizes requests; nil:
	// no SASL, everything allowed.
	Security *security.Service
	// SASLMechanisms are the mechanisms SASL listeners offer.
	SASLMechanisms []string
	// MaxReauth is the longest a SASL session lasts before the client must
	// re-authenticate (Kafka connections.max.reauth.ms); 0: no limit.
	MaxReauth time.Duration
	// AuthTimeout closes connections that have not authenticated in time.
	AuthTimeout time.Duration
	// Guard limits unauthenticated connections and slows failing sources.
	Guard *security.Guard
	// Quotas throttle produce and fetch bytes and refuse writes past a
	// storage quota, per tenant and namespace; nil: none.
	Quotas *quota.Manager
	// ObserveRequest, when set, is told of each handled request (metrics).
	ObserveRequest func(api string, took time.Duration)
	Logger         *slog.Logger
}

// drainGrace is how long a stopping listener's connections have to answer
// the requests they already read.
const drainGrace = 2 * time.Second

// Server is the Kafka listener.
type Server struct {
	opts     Options
	log      *slog.Logger
	be       backends
	forwards forwardStreams // protocol-only nodes' client connections
	batches  *kbatch.Reader // decodes batches of compacted topics
	budget   *task.ByteBudget
	sessions *fetchSessions
	shares   *shareSessions
	frames   framePool
}

// NewServer builds the front-end; it serves the groups attached to it
// (Attach). NewSingle builds a single node's.
func NewServer(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NodeID == 0 {
		opts.NodeID = 1
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = 100 << 20
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = task.FrameTimeout
	}
	if opts.MaxInflightPerConn <= 0 {
		opts.MaxInflightPerConn = 64
	}
	if opts.MaxBytesInFlight < int64(opts.MaxFrameBytes) {
		opts.MaxBytesInFlight = int64(opts.MaxFrameBytes) * 4
	}
	if opts.Budget == nil {
		opts.Budget = task.NewByteBudget(opts.MaxBytesInFlight)
	}
	s := &Server{
		opts: opts, log: opts.Logger.With("proto", "kafka"),
		budget: opts.Budget, sessions: newFetchSessions(), shares: newShareSessions(),
		batches: kbatch.NewReader(int(opts.MaxFrameBytes) * 4),
	}
	none := make(backendSet, s.groupCount())
	s.be.cur.Store(&none)
	return s
}

// NewSingle builds a single node's front-end over its one stack.
func NewSingle(be Backend, opts Options) *Server {
	opts.Groups = 1
	s := NewServer(opts)
	s.Attach(0, be)
	return s
}

// Serve accepts connections of a PLAINTEXT listener until ctx ends, then
// closes them and waits.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return s.ServeListener(ctx, l, Listener{Name: ProtocolPlaintext, Protocol: ProtocolPlaintext})
}

// ServeListener serves one named listener; its TLS is the caller's (l
// hands out TLS connections when the protocol asks for them).
func (s *Server) ServeListener(ctx context.Context, l net.Listener, lis Listener) error {
	if lis.SASL() && s.opts.Security == nil {
		return fmt.Errorf("kafka listener %s: SASL needs the security service", lis.Name)
	}
	// When the listener stops (the node stops, or a cluster member's term
	// ends), requests already read are answered before the connection
	// closes: franz-go fails the records of a connection that closes
	// before any answer but ApiVersions, as it would for missing SASL.
	return task.ServeConnsDraining(ctx, "kafka", l, drainGrace, func(ctx context.Context, nc net.Conn) { newConn(s, nc, lis).serve(ctx) })
}

// advertised returns the host and port clients of a connection should
// use: its listener's advertised address, the configured one, or the
// local address of the connection itself.
func (s *Server) advertised(c *conn) (string, int32) {
	addr := c.listener.Advertised
	if addr == "" {
		addr = s.opts.AdvertisedAddr
	}
	if local := c.nc.LocalAddr(); addr == "" && local != nil {
		addr = local.String()
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "localhost", 9092
	}
	p, _ := strconv.Atoi(port)
	return host, int32(p)
}
