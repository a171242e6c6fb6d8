// Package app is Rosetta's composition root: it builds the storage engine,
// the metadata store, the broker core, the front-ends and the admin server
// from one Config, and owns their lifecycle.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/grpcv5"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
	"github.com/rosettamq/rosetta/internal/tlsmux"
)

// Version is set at build time with -ldflags "-X ...app.Version=...".
var Version = "dev"

// NewLogger builds the process logger from the log configuration.
func NewLogger(c LogConfig, w io.Writer) (*slog.Logger, error) {
	lvl, err := parseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%w: log.level %q", model.ErrInvalidConfig, s)
	}
	return l, nil
}

// StorageConfig maps the storage section onto the engine's configuration.
func (c Config) StorageConfig(log *slog.Logger) storage.Config {
	s := storage.DefaultConfig(filepath.Join(c.DataDir, "storage"))
	s.SegmentSize = int64(c.Storage.SegmentSize)
	s.MaxRecordSize = int(c.Storage.MaxRecordSize)
	s.Durability = storage.DurabilityAsync
	if c.Storage.Durability == "sync" {
		s.Durability = storage.DurabilitySync
	}
	s.FlushInterval = c.Storage.FlushInterval
	s.CheckpointInterval = c.Storage.CheckpointInterval
	s.RetentionBytes = int64(c.Storage.RetentionBytes)
	s.GCMinorThreshold, s.GCMajorThreshold = c.Storage.GCMinorThreshold, c.Storage.GCMajorThreshold
	s.GCMinorInterval, s.GCMajorInterval = c.Storage.GCMinorInterval, c.Storage.GCMajorInterval
	s.GCBytesPerSecond = int64(c.Storage.GCBytesPerSecond)
	s.MinFreeBytes = int64(c.Storage.MinFreeBytes)
	s.MinFreeRatio = c.Storage.MinFreeRatio
	s.VerifyReads = c.Storage.VerifyReads
	s.MaxOpenIndexFiles = c.Storage.MaxOpenIndexFiles
	s.NodeID = model.NodeID(c.NodeID)
	s.Logger = log
	return s
}

// App is a running Rosetta node.
type App struct {
	cfg    Config
	log    *slog.Logger
	engine *storage.Engine
	meta   meta.Store
	// membership is the node's registration in its cluster's etcd (nil on
	// a node with its own store).
	membership *cluster.Membership
	started    time.Time
	broker     *broker.Broker
	groups     *groups.Coordinator
	producers  *producers.Manager
	kafkaTxns  *producers.TxnIndex
	txns       *txn.Coordinator
	pop        *pop.Engine
	security   *security.Service
	guard      *security.Guard
	quotas     *quota.Manager
	metrics    *admin.Metrics

	mu        sync.Mutex
	listeners map[string]net.Listener
}

// New opens storage and metadata and builds the broker. Listeners open in Run.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	cfg.Listen = cfg.Listen.withHost()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	a := &App{cfg: cfg, log: log, metrics: admin.NewMetrics(), listeners: map[string]net.Listener{}, started: time.Now()}
	sc := cfg.StorageConfig(log)
	sc.OnSynced = func(took time.Duration) {
		a.metrics.FsyncSeconds.Observe(took.Seconds())
		if cfg.Hooks.AfterSync != nil {
			cfg.Hooks.AfterSync()
		}
	}
	var err error
	if a.meta, err = openMeta(ctx, cfg, log); err != nil {
		return nil, err
	}
	// Producer state is checkpointed with the log and rebuilt from it.
	a.producers = producers.New(a.meta, producers.Options{
		Expiration: cfg.Broker.ProducerIDExpiration,
		MaxStates:  cfg.Broker.MaxProducerStates,
		Logger:     log,
	})
	a.kafkaTxns = producers.NewTxnIndex()
	sc.StateKeepers = append(sc.StateKeepers, a.producers, a.kafkaTxns)
	if a.engine, err = storage.Open(sc); err != nil {
		a.meta.Close()
		return nil, err
	}
	if cfg.Cluster.EtcdEndpoints != "" {
		if a.membership, err = a.joinCluster(ctx); err != nil {
			a.engine.Close()
			a.meta.Close()
			return nil, err
		}
	}
	delays, err := broker.ParseDelayLevels(cfg.Broker.DelayLevels)
	if err != nil {
		a.meta.Close()
		a.engine.Close()
		return nil, err
	}
	if a.quotas, err = quota.New(ctx, a.meta, log); err != nil {
		a.meta.Close()
		a.engine.Close()
		return nil, err
	}
	a.broker, err = broker.New(ctx, a.engine, a.meta, broker.Options{
		CheckTopicCreate:  a.quotas.CheckTopicCreate,
		TopicCreated:      a.quotas.TopicCreated,
		DelayLevels:       delays,
		MaxTimerDelay:     cfg.Broker.MaxTimerDelay,
		Retention:         cfg.topicRetention(),
		RetentionBytes:    int64(cfg.Broker.RetentionBytes),
		TxnTimeout:        cfg.Broker.TransactionTimeout,
		TxnCheckInterval:  cfg.Broker.TransactionCheckInterval,
		TxnCheckMax:       cfg.Broker.TransactionCheckMax,
		AutoCreateTopics:  cfg.Broker.AutoCreateTopics,
		DefaultQueues:     cfg.Broker.DefaultQueues,
		MaxQueuesPerTopic: cfg.Broker.MaxQueuesPerTopic,
		KafkaTxns:         a.kafkaTxns,
		Logger:            log,

		OffsetSnapshotInterval: cfg.Broker.StateSnapshotInterval,
	})
	if err != nil {
		a.meta.Close()
		a.engine.Close()
		return nil, err
	}
	a.txns, err = txn.New(ctx, a.broker, a.producers, a.kafkaTxns, txn.Options{
		MaxTimeout: cfg.Broker.TransactionMaxTimeout, SnapshotInterval: cfg.Broker.StateSnapshotInterval, Logger: log})
	if err != nil {
		a.broker.Close()
		a.meta.Close()
		a.engine.Close()
		return nil, fmt.Errorf("transaction coordinator: %w", err)
	}
	if a.pop, err = pop.New(ctx, a.broker, pop.Options{SnapshotInterval: cfg.Broker.StateSnapshotInterval, Logger: log}); err != nil {
		a.txns.Close()
		a.broker.Close()
		a.meta.Close()
		a.engine.Close()
		return nil, fmt.Errorf("pop engine: %w", err)
	}
	if a.security, err = newSecurity(ctx, cfg, a.meta, log); err != nil {
		a.pop.Close()
		a.txns.Close()
		a.broker.Close()
		a.meta.Close()
		a.engine.Close()
		return nil, err
	}
	a.guard = security.NewGuard(cfg.Security.MaxUnauthenticated, cfg.Security.FailureDelay, 5*time.Second)
	a.groups = groups.New(groups.Options{Logger: log,
		MinSessionTimeout: cfg.Broker.GroupMinSessionTimeout, MaxSessionTimeout: cfg.Broker.GroupMaxSessionTimeout,
		ConsumerSessionTimeout: cfg.Broker.GroupConsumerSessionTimeout, ConsumerHeartbeatInterval: cfg.Broker.GroupConsumerHeartbeatInterval})
	return a, nil
}

// Broker returns the broker core.
func (a *App) Broker() *broker.Broker { return a.broker }

// Pop is the node's POP engine.
func (a *App) Pop() *pop.Engine { return a.pop }

// Addr returns the bound address of a listener ("http", "kafka", …) once Run
// has opened it, or "".
func (a *App) Addr(name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l, ok := a.listeners[name]; ok {
		return l.Addr().String()
	}
	return ""
}

func (a *App) listen(name, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s on %s: %w", name, addr, err)
	}
	a.mu.Lock()
	a.listeners[name] = l
	a.mu.Unlock()
	a.log.Info("listening", "listener", name, "addr", l.Addr().String())
	return l, nil
}

// Run serves until ctx ends, then shuts down gracefully: listeners stop
// accepting, in-flight work drains, state is checkpointed and files close,
// all within the configured shutdown timeout.
func (a *App) Run(ctx context.Context, ready func()) error {
	// Open every listener first, so a port in use fails before anything runs.
	var httpL, remotingL, grpcL net.Listener
	kafkaLs, kafkaSpecs, err := a.kafkaListeners()
	if err != nil {
		return errors.Join(err, a.close())
	}
	opened := []*net.Listener{}
	type listenSpec struct {
		name, addr, tls string
		alpn            []string
		l               *net.Listener
	}
	specs := []listenSpec{
		{"http", a.cfg.Listen.HTTP, a.cfg.Listen.HTTPTLS, []string{"http/1.1"}, &httpL},
		{"remoting", a.cfg.Listen.Remoting, a.cfg.Listen.RemotingTLS, nil, &remotingL},
		{"grpc", a.cfg.Listen.GRPC, a.cfg.Listen.GRPCTLS, []string{"h2"}, &grpcL},
	}
	for i, k := range kafkaSpecs {
		specs = append(specs, listenSpec{k.name, k.addr, k.tls, nil, &kafkaLs[i]})
	}
	for _, ln := range specs {
		if ln.addr == "" {
			continue
		}
		l, err := a.listen(ln.name, ln.addr)
		if err == nil {
			l, err = a.tlsListener(ln.name, l, ln.tls, ln.alpn...)
		}
		if err != nil {
			for _, o := range opened {
				(*o).Close()
			}
			return errors.Join(err, a.close())
		}
		*ln.l = l
		opened = append(opened, ln.l)
	}

	if len(kafkaSpecs) > 0 && kafkaSpecs[0].name != "kafka" {
		a.mu.Lock()
		a.listeners["kafka"] = a.listeners[kafkaSpecs[0].name]
		a.mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	var httpSrv *http.Server
	if httpL != nil {
		admin.RegisterPopMetrics(a.metrics.Registry, a.pop)
		httpSrv = &http.Server{Handler: admin.Handler(a.broker, a.metrics, a.log, admin.Security{Service: a.security, Quotas: a.quotas}, a.clusterStatus), ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := httpSrv.Serve(httpL); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http: %w", err)
			}
			return nil
		})
	}
	if a.membership != nil {
		// A node fenced by a newer incarnation of itself, or whose lease
		// ended, stops serving.
		g.Go(func() error {
			select {
			case <-gctx.Done():
				return nil
			case <-a.membership.Lost():
				return a.membership.Err()
			}
		})
	}
	g.Go(func() error { returnMemory(gctx, a.log); return nil })
	g.Go(func() error { a.security.Run(gctx); return nil })
	g.Go(func() error { a.quotas.Run(gctx, a.broker); return nil })
	// One request byte budget for every front-end that frames requests.
	budget := task.NewByteBudget(int64(a.cfg.Limits.MaxBytesInFlight))
	if len(kafkaLs) > 0 {
		srv := kafka.NewServer(a.broker, a.groups, kafka.Options{
			Budget:             budget,
			NodeID:             int32(a.cfg.NodeID),
			AdvertisedAddr:     a.cfg.Listen.KafkaAdvertised,
			ClusterID:          a.clusterID(),
			MaxFrameBytes:      int32(a.cfg.Limits.MaxFrameBytes),
			MaxInflightPerConn: a.cfg.Limits.MaxInflightPerConn,
			MaxBytesInFlight:   int64(a.cfg.Limits.MaxBytesInFlight),
			Producers:          a.producers,
			Transactions:       a.txns,
			Security:           a.security,
			SASLMechanisms:     splitComma(a.cfg.Security.SASLMechanisms),
			MaxReauth:          a.cfg.Security.MaxReauth,
			AuthTimeout:        a.cfg.Security.AuthTimeout,
			Guard:              a.guard,
			Quotas:             a.quotas,
			ObserveRequest:     func(api string, took time.Duration) { a.metrics.ObserveRequest("kafka", api, took) },
			Logger:             a.log,
		})
		for i, l := range kafkaLs {
			lis := kafkaSpecs[i].listener
			g.Go(func() error { return srv.ServeListener(gctx, l, lis) })
		}
	}
	if remotingL != nil {
		srv := remoting.NewServer(a.broker, remoting.Options{
			Budget:             budget,
			AdvertisedAddr:     a.cfg.Listen.RemotingAdvertised,
			MaxFrameBytes:      int32(min(int64(a.cfg.Limits.MaxFrameBytes), 1<<30)),
			MaxInflightPerConn: a.cfg.Limits.MaxInflightPerConn,
			Pop:                a.pop,
			Security:           a.security,
			Authentication:     a.cfg.Security.RemotingAuthentication,
			Guard:              a.guard,
			Quotas:             a.quotas,
			ObserveRequest:     func(code string, took time.Duration) { a.metrics.ObserveRequest("remoting", code, took) },
			Logger:             a.log,
		})
		g.Go(func() error { return srv.Serve(gctx, remotingL) })
	}
	if grpcL != nil {
		srv := grpcv5.NewServer(a.broker, grpcv5.Options{
			AdvertisedAddr: a.cfg.Listen.GRPCAdvertised,
			Pop:            a.pop,
			Security:       a.security,
			Authentication: a.cfg.Security.GRPCAuthentication,
			Guard:          a.guard,
			Quotas:         a.quotas,
			ObserveRequest: func(rpc string, took time.Duration) { a.metrics.ObserveRequest("grpc", rpc, took) },
			Logger:         a.log,
		})
		g.Go(func() error { return srv.Serve(gctx, grpcL) })
	}
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	start := time.Now()
	a.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	if httpSrv != nil {
		_ = httpSrv.Shutdown(sctx)
	}
	err = g.Wait()
	if cerr := a.close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	a.log.Info("stopped", "took", time.Since(start))
	return err
}

func (a *App) listenAddr(name string) string {
	switch strings.ToLower(name) {
	case "kafka":
		return a.cfg.Listen.Kafka
	case "remoting":
		return a.cfg.Listen.Remoting
	case "grpc":
		return a.cfg.Listen.GRPC
	}
	return ""
}

// close releases everything in reverse order of construction.
func (a *App) close() error {
	var errs []error
	a.groups.Close()
	a.pop.Close()
	errs = append(errs, a.txns.Close())
	errs = append(errs, a.broker.Close())
	if a.membership != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, a.membership.Leave(ctx))
		cancel()
	}
	errs = append(errs, a.meta.Close())
	errs = append(errs, a.engine.Close())
	return errors.Join(errs...)
}

// tlsListener serves TLS on a listener per its mode (listen.<name>_tls):
// permissive (TLS and plaintext on the one port, told apart by the first
// byte — what RocketMQ's proxy offers; no Kafka, remoting or HTTP request
// begins with a TLS handshake byte), enforcing or disabled. The
// certificate is tls.cert_file/tls.key_file, re-read when they change, or
// a self-signed one (the RocketMQ clients skip verification by default).
// l is closed on failure.
func (a *App) tlsListener(name string, l net.Listener, modeName string, alpn ...string) (net.Listener, error) {
	mode, err := tlsmux.ParseMode(modeName)
	if err != nil || mode == tlsmux.Disabled {
		return l, err
	}
	cfg, err := tlsmux.ServerConfig(a.cfg.TLS.CertFile, a.cfg.TLS.KeyFile, alpn...)
	if err == nil {
		err = tlsmux.WithClientAuth(cfg, a.cfg.TLS.ClientAuth, a.cfg.TLS.ClientCAFile)
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	if a.cfg.TLS.CertFile == "" {
		a.log.Debug("TLS uses a self-signed certificate; set tls.cert_file and tls.key_file for a real one", "listener", name, "mode", mode)
	}
	return tlsmux.Listen(l, cfg, mode, a.log.With("listener", name)), nil
}

// StateDump renders the state the node's log determines (broker state and
// idempotent-producer states) in a stable text form, for replay-equivalence
// tests.
func (a *App) StateDump() (string, error) {
	producers, err := a.producers.Capture()
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	sb.WriteString(a.broker.StateDump())
	fmt.Fprintf(&sb, "producers %x\n", producers)
	sb.WriteString(a.kafkaTxns.Dump())
	sb.WriteString(a.pop.Dump())
	if a.txns != nil {
		for _, st := range a.txns.List(nil, nil) {
			fmt.Fprintf(&sb, "transaction %+v\n", st)
		}
	}
	return sb.String(), nil
}
