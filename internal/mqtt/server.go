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
	"github.com/rosettamq/rosetta/internal/broker/pop"
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
	// ObserveRequest, when set, is told of each packet a client sent and
	// how long handling it took (metrics per packet type).
	ObserveRequest func(packet string, took time.Duration)
	// Pop is the POP engine shared subscriptions ($share/<name>/<filter>)
	// consume through (nil: they are refused).
	Pop *pop.Engine
}

// Server serves MQTT over a broker.
type Server struct {
	b        *broker.Broker
	opts     Options
	log      *slog.Logger
	batches  *kbatch.Reader
	appender *produce.Appender
	remote   *remoteQueues // other groups' queues (a cluster)
	// writeBufs are connections' write buffers between flushes.
	writeBufs sync.Pool
	idPrefix  string
	assigned  atomic.Uint64 // client identifiers assigned

	mu       sync.Mutex
	sessions map[string]*session
	topicsCh chan struct{} // closed when the broker's topics change
	retained *retainedStore
	store    *store // the durable state (nil before Open: kept in memory only)
	wg       sync.WaitGroup
	// life ends when the server closes (Close); watchOnce starts the
	// topics watcher with the first Serve.
	life      context.Context
	stop      context.CancelFunc
	watchOnce sync.Once
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
	life, stop := context.WithCancel(context.Background())
	batches := kbatch.NewReader(16 << 20)
	return &Server{b: b, opts: opts, log: opts.Logger.With("protocol", "mqtt"), batches: batches,
		appender: produce.New(b, nil, nil, nil, batches), remote: &remoteQueues{els: b.Elsewhere(), b: b}, idPrefix: "rosetta-" + hex.EncodeToString(id[:]),
		sessions: map[string]*session{}, retained: newRetainedStore(), topicsCh: make(chan struct{}), life: life, stop: stop,
		writeBufs: sync.Pool{New: newWriteBuf}}
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
	s.watchOnce.Do(func() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchTopics(s.life)
		}()
	})
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
		go c.serve(s.wg.Done)
	}
	cancel()
	s.stop()
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
		prev, stop := old.attach(c)
		if prev != nil {
			prev.takenOver()
		}
		stop()
		return old, true
	}
	ss = newSession(s, clientID)
	s.sessions[clientID] = ss
	s.mu.Unlock()
	if old != nil {
		prev, stop := old.attach(nil)
		if prev != nil {
			prev.takenOver()
		}
		stop()
		old.stopExpiry()
	}
	ss.attach(c)
	return ss, false
}

// watchTopics closes the topics-changed channel whenever the broker's
// topics change (sessions reading every topic, or waiting for one that
// does not exist yet, look again), until ctx ends.
func (s *Server) watchTopics(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	ver := s.b.TopicsVersion()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if v := s.b.TopicsVersion(); v != ver {
			ver = v
			s.mu.Lock()
			close(s.topicsCh)
			s.topicsCh = make(chan struct{})
			s.mu.Unlock()
		}
	}
}

// topicsChanged is closed when the broker's topics next change.
func (s *Server) topicsChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topicsCh
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
