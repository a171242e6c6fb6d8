// Package mqtt is the MQTT front-end (protocol levels 3.1, 3.1.1 and 5.0)
// over the broker: connections and sessions, publishes stored as records
// of Rosetta topics (mapping.go) and subscriptions delivered by reading
// those topics' queues (session.go), retained and will messages.
//
// Sessions live in memory: a session that outlives its connection (clean
// start off, or a session expiry interval) keeps its subscriptions and
// its place in each queue until it expires or the broker stops.
package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// Mapping maps MQTT topics to Rosetta topics (default: the first
	// level, and the topic "mqtt" for names that make none).
	Mapping Mapping
	// MaxPacketSize bounds a packet (default 1 MiB); CONNACK tells MQTT 5
	// clients.
	MaxPacketSize int
	// MaxInflight bounds the QoS 1 and 2 messages sent to a client and
	// not yet acknowledged (MQTT 5 clients' receive maximum when lower;
	// default 64).
	MaxInflight int
	// MaxSessionExpiry bounds how long a session outlives its connection
	// (default a day).
	MaxSessionExpiry time.Duration
	// Security authenticates (user name and password) and authorizes
	// (nil: everything is allowed).
	Security *security.Service
	// Authentication requires a user name and password at CONNECT.
	Authentication bool
}

// Server serves MQTT over a broker.
type Server struct {
	b        *broker.Broker
	opts     Options
	log      *slog.Logger
	batches  *kbatch.Reader
	appender *produce.Appender
	idPrefix string
	assigned atomic.Uint64 // client identifiers assigned

	mu       sync.Mutex
	sessions map[string]*session
	retained *retainedStore
	wg       sync.WaitGroup
}

// NewServer returns a server over b.
func NewServer(b *broker.Broker, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Mapping.Levels == 0 && opts.Mapping.Default == (model.TopicName{}) {
		opts.Mapping.Levels = 1
	}
	if opts.Mapping.Default == (model.TopicName{}) {
		opts.Mapping.Default = model.TopicName{Tenant: model.DefaultTenant, Namespace: model.DefaultNamespace, Topic: "mqtt"}
	}
	if opts.MaxPacketSize <= 0 {
		opts.MaxPacketSize = 1 << 20
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 64
	}
	if opts.MaxSessionExpiry <= 0 {
		opts.MaxSessionExpiry = 24 * time.Hour
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	batches := kbatch.NewReader(16 << 20)
	return &Server{b: b, opts: opts, log: opts.Logger.With("protocol", "mqtt"), batches: batches,
		appender: produce.New(b, nil, nil, nil, batches), idPrefix: "rosetta-" + hex.EncodeToString(id[:]),
		sessions: map[string]*session{}, retained: newRetainedStore()}
}

// Serve accepts connections on l until ctx ends, then closes them and
// waits for their goroutines.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
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
	s.mu.Lock()
	for _, ss := range s.sessions {
		ss.stopExpiry()
	}
	s.mu.Unlock()
	return err
}

// takeSession gives a connecting client its session: the one it left when
// clean is false and it has not expired (present true), else a new one.
// A connection still holding the session is closed.
func (s *Server) takeSession(c *conn, clientID string, clean bool) (ss *session, present bool) {
	s.mu.Lock()
	old := s.sessions[clientID]
	if old != nil && !clean {
		s.mu.Unlock()
		if prev := old.attach(c); prev != nil {
			prev.takenOver()
		}
		return old, true
	}
	ss = newSession(s, clientID)
	s.sessions[clientID] = ss
	s.mu.Unlock()
	if old != nil {
		if prev := old.end(); prev != nil {
			prev.takenOver()
		}
	}
	ss.attach(c)
	return ss, false
}

// dropSession forgets a session (it expired, or was clean) unless another
// took its client identifier since.
func (s *Server) dropSession(ss *session) {
	s.mu.Lock()
	if s.sessions[ss.clientID] == ss {
		delete(s.sessions, ss.clientID)
	}
	s.mu.Unlock()
}

// SessionCount is how many sessions the server holds (connected or not).
func (s *Server) SessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}
