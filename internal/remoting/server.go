package remoting

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/filter"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/locks"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
	"github.com/rosettamq/rosetta/internal/task"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

// Options configure the remoting front-end.
type Options struct {
	// Tracer records send spans (nil: none).
	Tracer *telemetry.Tracer
	// IdleTimeout closes a connection that sends nothing for this long;
	// FrameTimeout (plus a second per MiB) is how long a request has to
	// arrive whole once its first byte did (defaults when zero).
	IdleTimeout, FrameTimeout time.Duration
	// AdvertisedAddr is the host:port routes point clients at; empty: the
	// address each client connected to, or what Advertise says for it.
	AdvertisedAddr string
	// Advertise, when set, may name another address for a connection
	// (empty: its local address): a cluster member points clients that
	// came through another member's relay back at that member.
	Advertise  func(local, remote net.Addr) string
	BrokerName string
	// Cluster, when set, lists the brokers of a cluster of several
	// replication groups, by group, for routes (this server is one of
	// them), as told to a client connected from remote; nil: this broker is
	// the only one.
	Cluster            func(remote net.Addr) []BrokerRoute
	ClusterName        string
	MaxFrameBytes      int32 // default 16 MiB, as RocketMQ's frameMaxLength
	MaxInflightPerConn int   // requests running at once per connection
	// ReadLinger, when positive, lets a plaintext connection whose client
	// keeps many requests in flight wait up to this long for more before
	// reading (task.LingerConn), as long as that does not slow the client.
	ReadLinger time.Duration
	// Budget bounds the request bytes held at once (shared with other
	// front-ends when given); nil: a budget of four maximum frames.
	Budget *task.ByteBudget
	// Pop is the POP engine POP_MESSAGE pops through; nil: POP codes are
	// not supported.
	Pop *pop.Engine
	// Security authenticates signed requests and authorizes them; nil:
	// everything allowed.
	Security *security.Service
	// Authentication requires every request to be signed (RocketMQ ACL).
	Authentication bool
	// Guard slows sources that fail to authenticate.
	Guard *security.Guard
	// Quotas limit produce rates and storage per tenant and namespace.
	Quotas *quota.Manager
	// ObserveRequest, when set, is told of each handled request (metrics).
	ObserveRequest func(code string, took time.Duration)
	Logger         *slog.Logger
}

// handlerFunc answers one request; it returns nil when there is nothing to
// send (one-way requests).
type handlerFunc func(rc *reqCtx, req *protocol.Command) *protocol.Command

// Server is the remoting listener.
type Server struct {
	opts     Options
	log      *slog.Logger
	broker   *broker.Broker
	handlers map[int32]handlerFunc
	clients  *registry
	locks    *locks.Manager
	sqlMu    sync.Mutex
	sqlCache map[string]*filter.Expr // compiled SQL92 subscriptions, bounded
	batches  *kbatch.Reader          // reads Kafka-produced records for remoting consumers
	pop      *pop.Engine
	opaque   atomic.Int32 // opaques of server-initiated requests
	stats    serverStats
}

// NewServer builds the front-end over a broker.
func NewServer(b *broker.Broker, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = 16 << 20
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = task.FrameTimeout
	}
	if opts.MaxInflightPerConn <= 0 {
		opts.MaxInflightPerConn = 256
	}
	if opts.Budget == nil {
		opts.Budget = task.NewByteBudget(4 * int64(opts.MaxFrameBytes))
	}
	if opts.BrokerName == "" {
		opts.BrokerName = "rosetta"
	}
	if opts.ClusterName == "" {
		opts.ClusterName = "DefaultCluster"
	}
	s := &Server{stats: serverStats{started: time.Now()}, opts: opts, log: opts.Logger.With("proto", "remoting"), broker: b,
		clients: newRegistry(), batches: kbatch.NewReader(64 << 20), pop: opts.Pop, locks: locks.New(60*time.Second, nil)}
	s.handlers = s.handlerTable()
	b.AddTxnChecker(s.checkTransaction)
	return s
}

// handlerTable maps request codes to handlers; one file per request family.
func (s *Server) handlerTable() map[int32]handlerFunc {
	return map[int32]handlerFunc{
		protocol.GetRouteInfoByTopic:              handleGetRouteInfo,
		protocol.EndTransaction:                   handleEndTransaction,
		protocol.PopMessage:                       handlePopMessage,
		protocol.AckMessage:                       handleAckMessage,
		protocol.BatchAckMessage:                  handleBatchAck,
		protocol.QueryAssignment:                  handleQueryAssignment,
		protocol.SetMessageRequestMode:            handleSetMessageRequestMode,
		protocol.ChangeMessageInvisibleTime:       handleChangeInvisibleTime,
		protocol.Notification:                     handleNotification,
		protocol.GetBrokerClusterInfo:             handleGetBrokerClusterInfo,
		protocol.GetAllTopicListFromNameserver:    handleGetAllTopicList,
		protocol.HeartBeat:                        handleHeartbeat,
		protocol.UnregisterClient:                 handleUnregisterClient,
		protocol.GetConsumerListByGroup:           handleGetConsumerList,
		protocol.CheckClientConfig:                handleCheckClientConfig,
		protocol.SendMessage:                      handleSendMessage,
		protocol.SendMessageV2:                    handleSendMessage,
		protocol.SendBatchMessage:                 handleSendMessage,
		protocol.SendReplyMessage:                 handleSendReplyMessage,
		protocol.SendReplyMessageV2:               handleSendReplyMessage,
		protocol.PullMessage:                      handlePullMessage,
		protocol.RecallMessage:                    handleRecallMessage,
		protocol.LitePullMessage:                  handlePullMessage,
		protocol.QueryConsumerOffset:              handleQueryConsumerOffset,
		protocol.UpdateConsumerOffset:             handleUpdateConsumerOffset,
		protocol.GetMaxOffset:                     handleGetMaxOffset,
		protocol.GetMinOffset:                     handleGetMinOffset,
		protocol.SearchOffsetByTimestamp:          handleSearchOffsetByTimestamp,
		protocol.ConsumerSendMsgBack:              handleConsumerSendMsgBack,
		protocol.ViewMessageByID:                  handleViewMessageByID,
		protocol.UpdateAndCreateTopic:             handleUpdateAndCreateTopic,
		protocol.DeleteTopicInBroker:              handleDeleteTopic,
		protocol.DeleteTopicInNamesrv:             handleDeleteTopic,
		protocol.GetAllTopicConfig:                handleGetAllTopicConfig,
		protocol.GetEarliestMsgStoreTime:          handleGetEarliestMsgStoreTime,
		protocol.GetConsumerConnectionList:        handleGetConsumerConnectionList,
		protocol.QueryMessage:                     handleQueryMessage,
		protocol.LockBatchMQ:                      handleLockBatch,
		protocol.UnlockBatchMQ:                    handleUnlockBatch,
		protocol.UpdateAndCreateSubscriptionGroup: handleUpdateSubscriptionGroup,
		protocol.GetAllSubscriptionGroupConfig:    handleGetAllSubscriptionGroups,
		protocol.DeleteSubscriptionGroup:          handleDeleteSubscriptionGroup,
		protocol.GetTopicStatsInfo:                handleGetTopicStats,
		protocol.GetConsumeStats:                  handleGetConsumeStats,
		protocol.InvokeBrokerToResetOffset:        handleResetOffset,
		protocol.GetConsumerRunningInfo:           handleGetConsumerRunningInfo,
		protocol.ConsumeMessageDirectly:           handleConsumeMessageDirectly,
		protocol.InvokeBrokerToGetConsumerStatus:  handleGetConsumerStatus,
		protocol.GetBrokerRuntimeInfo:             handleGetBrokerRuntimeInfo,
		protocol.AuthCreateUser:                   handleAuthUser,
		protocol.AuthUpdateUser:                   handleAuthUser,
		protocol.AuthDeleteUser:                   handleAuthUser,
		protocol.AuthGetUser:                      handleAuthUser,
		protocol.AuthListUser:                     handleAuthUser,
		protocol.AuthCreateACL:                    handleAuthACL,
		protocol.AuthUpdateACL:                    handleAuthACL,
		protocol.AuthDeleteACL:                    handleAuthACL,
		protocol.AuthGetACL:                       handleAuthACL,
		protocol.AuthListACL:                      handleAuthACL,
	}
}

// Serve accepts connections until ctx ends, then closes them and waits.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return task.ServeConns(ctx, "remoting", l, func(ctx context.Context, nc net.Conn) { newConn(s, nc).serve(ctx) })
}

// advertised returns the address clients should use for this node: the
// configured one, or the local address of the client's own connection.
func (s *Server) advertised(local, remote net.Addr) string {
	if s.opts.AdvertisedAddr != "" {
		return s.opts.AdvertisedAddr
	}
	if s.opts.Advertise != nil {
		if addr := s.opts.Advertise(local, remote); addr != "" {
			return addr
		}
	}
	if local != nil {
		return local.String()
	}
	return "127.0.0.1:9876"
}

// unsupported answers a request code with no handler.
func unsupported(req *protocol.Command) *protocol.Command {
	return protocol.NewResponse(req, protocol.RequestCodeNotSupported,
		"request code "+strconv.Itoa(int(req.Code))+" not supported")
}

// topicRef is a topic as the broker knows it.
type topicRef = broker.Topic
