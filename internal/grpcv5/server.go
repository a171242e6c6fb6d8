package grpcv5

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/task"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

// Options configure the gRPC front-end.
type Options struct {
	// Tracer records send spans (nil: none).
	Tracer *telemetry.Tracer
	// FrameTimeout (plus a second per MiB) is how long an HTTP/2 frame has
	// to arrive whole once it started (task.FrameTimeout when zero).
	FrameTimeout time.Duration
	// AdvertisedAddr is the host:port routes name; empty: the address each
	// client connected to.
	AdvertisedAddr string
	BrokerName     string
	// Cluster, when set, lists the brokers of a cluster of several
	// replication groups, by group, for routes (this server is one of
	// them), as told to a client connected from remote (nil when
	// unknown); nil: this broker is the only one.
	Cluster func(remote net.Addr) []BrokerRoute
	// Pop is the POP engine consumers receive through; nil: receiving is
	// NOT_IMPLEMENTED.
	Pop          *pop.Engine
	MaxBodyBytes int32 // largest message body accepted (4 MiB)
	// Security authenticates calls and authorizes them; nil: everything
	// allowed.
	Security *security.Service
	// Authentication requires every call to carry a signed authorization
	// header.
	Authentication bool
	// Guard slows sources that fail to authenticate.
	Guard *security.Guard
	// Quotas limit produce rates and storage per tenant and namespace.
	Quotas *quota.Manager
	// ObserveRequest, when set, is told of each handled call (metrics).
	ObserveRequest func(rpc string, took time.Duration)
	Logger         *slog.Logger
}

// Server is the gRPC listener.
type Server struct {
	v2.UnimplementedMessagingServiceServer
	opts    Options
	log     *slog.Logger
	broker  *broker.Broker
	clients *registry
	pop     *pop.Engine
	renew   renewals
	// roundRobin spreads messages without a group over the queues.
	roundRobin atomic.Uint32
	// serving ends when Serve's context does (the term's, in a cluster).
	serving atomic.Pointer[context.Context]
}

// NewServer builds the front-end over a broker.
func NewServer(b *broker.Broker, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BrokerName == "" {
		opts.BrokerName = "rosetta"
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = task.FrameTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	s := &Server{opts: opts, log: opts.Logger.With("proto", "grpc"), broker: b, clients: newRegistry(), pop: opts.Pop}
	b.AddTxnChecker(s.recoverOrphan)
	return s
}

// Serve answers calls on l until ctx ends or l closes, then stops
// gracefully (calls in flight finish; streams are cut after a grace
// period) and returns once the connections it took are closed.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	// The calls' view of serving ends with ctx, and also when l closes
	// first: a cluster member ending its term closes the term's listeners
	// before it cancels the term, and the connections l took then must end
	// with it rather than go on being answered by a broker that stopped
	// (a parked receive would answer "no new message" for good).
	sctx, endServing := context.WithCancel(ctx)
	defer endServing()
	s.serving.Store(&sctx)
	// A connection with no call for 10 minutes is sent away (clients
	// reconnect when they next call; their telemetry streams keep live
	// ones busy), so idle connections do not pile up.
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(2*int(s.opts.MaxBodyBytes)+1<<20), grpc.ChainUnaryInterceptor(s.observeUnary, s.authUnary),
		grpc.ChainStreamInterceptor(s.observeStream, s.authStream),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 10 * time.Minute}),
		// Calls run on a pool of goroutines whose stacks have grown
		// already, instead of a new goroutine per call growing its stack
		// through the handler (one call per acknowledged message). The
		// pool covers as many concurrent calls as busy clients make (64
		// senders on 8 workers spent a quarter of the broker's CPU
		// growing the stacks of the 56 calls left over).
		grpc.NumStreamWorkers(uint32(max(128, 16*runtime.GOMAXPROCS(0)))))
	v2.RegisterMessagingServiceServer(gs, s)
	if s.pop != nil {
		var wg sync.WaitGroup
		rctx, cancel := context.WithCancel(sctx)
		task.Every(rctx, &wg, time.Second, s.renewDue, nil)
		defer func() {
			cancel()
			wg.Wait()
		}()
	}
	stopped := make(chan struct{})
	context.AfterFunc(sctx, func() {
		defer close(stopped)
		stopGracefully(gs, serverStopGrace)
	})
	err := gs.Serve(frameDeadlineListener{Listener: l, base: s.opts.FrameTimeout})
	// Whichever ended first, the calls see serving end and the server
	// stops its connections; Serve returns once they are closed.
	endServing()
	<-stopped
	if errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
		return nil
	}
	return err
}

// serverStopGrace is how long a stopping server waits for its calls to
// finish before it cuts their streams.
const serverStopGrace = 2 * time.Second

// stopGracefully stops gs, letting its calls finish for up to grace.
func stopGracefully(gs *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		gs.Stop()
		<-done
	}
}

func (s *Server) observeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	if obs := s.opts.ObserveRequest; obs != nil {
		obs(rpcName(info.FullMethod), time.Since(start))
	}
	return resp, err
}

func (s *Server) observeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	if obs := s.opts.ObserveRequest; obs != nil && !info.IsClientStream {
		obs(rpcName(info.FullMethod), time.Since(start))
	}
	return err
}

// rpcName is the method part of a full gRPC method name.
func rpcName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}
