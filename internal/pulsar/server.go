package pulsar

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// AdvertisedAddr is the host:port lookups name; empty: the address
	// each client connected to.
	AdvertisedAddr string
	// Pop is the POP engine Shared and Key_Shared subscriptions consume
	// through (nil: those subscription types are refused).
	Pop *pop.Engine
	// MaxMessageSize is told to clients in CONNECTED (default 5 MiB).
	MaxMessageSize int
	// Security authenticates and authorizes (nil: everything is allowed).
	Security *security.Service
	// Authentication requires credentials at CONNECT.
	Authentication bool
	// GroupAddr, on a cluster member, is the host:port where the clients
	// of replication group g's queues connect, told to a client that
	// reached this node (local) from remote: lookups name it, and
	// producers and consumers of queues another group serves are
	// refused. Nil: a single node, which serves every queue.
	GroupAddr func(g model.GroupID, local, remote net.Addr) string
	// GroupAdmin, on a cluster member, serves an admin request at group
	// g's leader's admin API (whose Pulsar endpoints answer for the
	// queues the group serves).
	GroupAdmin func(g model.GroupID) http.Handler
	// KeepAlive is how long a connection may stay silent before the
	// broker closes it (default 2 minutes; clients ping every 30 s).
	KeepAlive time.Duration
}

// Server serves the Pulsar binary protocol over a broker.
type Server struct {
	b        *broker.Broker
	opts     Options
	log      *slog.Logger
	batches  *kbatch.Reader
	appender *produce.Appender
	dedup    *dedup
	subs     *subscriptions
	live     liveProducers
	names    *producerNames
	// zstdEncoder compresses entries of ZSTD batches (made on first use).
	zstdEncoder func() (*zstd.Encoder, error)

	addrMu  sync.Mutex
	plain   string // the plaintext (or permissive) listener's address
	secured string // the TLS-only listener's address

	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewServer returns a server over b.
func NewServer(b *broker.Broker, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxMessageSize <= 0 || opts.MaxMessageSize > MaxMessageSize {
		opts.MaxMessageSize = MaxMessageSize
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 2 * time.Minute
	}
	batches := kbatch.NewReader(64 << 20)
	s := &Server{b: b, opts: opts, log: opts.Logger.With("protocol", "pulsar"), batches: batches,
		appender: produce.New(b, nil, nil, nil, batches), names: newProducerNames()}
	s.zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
	})
	s.dedup = newDedup(s)
	s.subs = newSubscriptions(s)
	return s
}

// serves reports whether this node serves Pulsar clients of group g's
// queues (a single node serves all).
func (s *Server) serves(g model.GroupID) bool {
	return s.opts.GroupAddr == nil || g == s.b.Placement().Group
}

// Serve accepts connections on l (plaintext, or TLS and plaintext) until
// ctx ends, then closes them and waits for their goroutines.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	s.addrMu.Lock()
	s.plain = l.Addr().String()
	s.addrMu.Unlock()
	return s.serve(ctx, l)
}

// ServeTLS is Serve for the TLS-only listener (pulsar+ssl://), which
// lookups name for TLS clients.
func (s *Server) ServeTLS(ctx context.Context, l net.Listener) error {
	s.addrMu.Lock()
	s.secured = l.Addr().String()
	s.addrMu.Unlock()
	return s.serve(ctx, l)
}

func (s *Server) serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	var err error
	for {
		nc, aerr := l.Accept()
		if aerr != nil {
			if ctx.Err() == nil && !errors.Is(aerr, net.ErrClosed) {
				err = aerr
			}
			break
		}
		c := newConn(ctx, s, nc)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
	}
	cancel()
	s.wg.Wait()
	s.closeOnce.Do(s.subs.close)
	return err
}
