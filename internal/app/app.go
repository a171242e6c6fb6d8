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
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/member"
	"github.com/rosettamq/rosetta/internal/memory"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/serving"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/telemetry"
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
	s.StatDisk = c.Storage.StatDisk
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
	// member is the node's cluster member runtime (cluster.members; nil
	// on a single node).
	member *member.Member
	// baseEndpoints are the member's listeners of group 0: a group's
	// RocketMQ listeners open beside them (groupEndpoints).
	baseEndpoints []serving.Endpoint
	// node serves clients: a single node's one stack, or each group's
	// while the member leads it.
	node      *serving.Node
	producers *producers.Manager
	kafkaTxns *producers.TxnIndex
	security  *security.Service
	guard     *security.Guard
	quotas    *quota.Manager
	metrics   *admin.Metrics
	tracer    *telemetry.Tracer // nil: no spans

	mu        sync.Mutex
	listeners map[string]net.Listener
}

// New opens storage and metadata and builds the broker. Listeners open in Run.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	cfg = cfg.withCluster()
	cfg.Listen = cfg.Listen.withHost()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	a := &App{cfg: cfg, log: log, metrics: admin.NewMetrics(), listeners: map[string]net.Listener{}, started: time.Now()}
	if cfg.protocolNode() {
		return a.newProtocol(ctx)
	}
	sc := cfg.StorageConfig(log)
	sc.OnSynced = func(took time.Duration) {
		a.metrics.FsyncSeconds.Observe(took.Seconds())
		if cfg.Hooks.AfterSync != nil {
			cfg.Hooks.AfterSync()
		}
	}
	var err error
	if sc.Tier, err = cfg.tierStorage(ctx, log); err != nil {
		return nil, err
	}
	if sc.Tier != nil {
		sc.Tier.OnColdRead = func(took time.Duration) { a.metrics.ColdReadSeconds.Observe(took.Seconds()) }
	}
	if a.tracer, err = telemetry.New(ctx, telemetry.Config{Endpoint: cfg.Telemetry.OTLPEndpoint, SampleRatio: cfg.Telemetry.SampleRatio,
		NodeID: cfg.NodeID, BatchTimeout: cfg.Telemetry.BatchTimeout}); err != nil {
		return nil, err
	}
	if a.replicated() {
		if err := a.newMember(ctx, &sc); err != nil {
			return nil, err
		}
	}
	if a.member != nil && !a.member.RunsEtcd() {
		a.meta, err = a.openMetaWaiting(ctx) // an etcd client: the members' etcd may be forming
	} else {
		a.meta, err = openMeta(ctx, cfg, a.etcdEndpoints(), a.member.EtcdTLS(), log)
	}
	if err != nil {
		a.closeBase()
		return nil, err
	}
	// Producer state is checkpointed with the log and rebuilt from it.
	a.producers = a.newProducers()
	a.kafkaTxns = producers.NewTxnIndex()
	sc.StateKeepers = append(sc.StateKeepers, a.producers, a.kafkaTxns)
	if a.member != nil {
		if err := a.member.InstallImage(sc.Dir, 0); err != nil {
			a.closeBase()
			return nil, err
		}
	}
	if a.engine, err = storage.Open(sc); err != nil {
		a.closeBase()
		return nil, err
	}
	if a.member != nil {
		if err := a.member.Settle(ctx, a.meta, a.engine, &serving.GroupState{Producers: a.producers, KafkaTxns: a.kafkaTxns}, sc); err != nil {
			a.closeBase()
			return nil, err
		}
		a.cfg.Cluster.Groups = a.member.MadeGroups()
	}
	if len(a.etcdEndpoints()) > 0 {
		if a.membership, err = a.joinCluster(ctx); err != nil {
			a.closeBase()
			return nil, err
		}
	}
	if a.member != nil {
		if err := a.member.CheckGroups(ctx); err != nil {
			a.closeBase()
			return nil, err
		}
	}
	if a.quotas, err = quota.New(ctx, a.meta, log); err != nil {
		a.closeBase()
		return nil, err
	}
	if a.security, err = newSecurity(ctx, cfg, a.meta, log); err != nil {
		a.closeBase()
		return nil, err
	}
	a.guard = security.NewGuard(cfg.Security.MaxUnauthenticated, cfg.Security.FailureDelay, 5*time.Second)
	deps, err := a.servingDeps()
	if err != nil {
		a.closeBase()
		return nil, err
	}
	a.node = serving.NewNode(deps)
	if a.member != nil {
		if err := a.member.Start(ctx, a.node.AnswerCalls); err != nil {
			a.closeBase()
			return nil, err
		}
		a.metrics.Registry.MustRegister(a.member.Collector())
		return a, nil
	}
	// A single node's engine holds every queue.
	if err := a.node.Start(ctx, serving.Parts{Engine: a.engine, Producers: a.producers, KafkaTxns: a.kafkaTxns}); err != nil {
		a.closeBase()
		return nil, err
	}
	return a, nil
}

// Broker returns the broker core (nil on a cluster member that does not
// lead its group).
func (a *App) Broker() *broker.Broker {
	if st := a.node.Stack(0); st != nil {
		return st.Broker
	}
	return nil
}

// Pop is the node's POP engine (nil like Broker).
func (a *App) Pop() *pop.Engine {
	if st := a.node.Stack(0); st != nil {
		return st.Pop
	}
	return nil
}

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

// openEndpoints opens every configured listener, so a port in use fails
// before anything runs.
func (a *App) openEndpoints() ([]serving.Endpoint, error) {
	kafkaSpecs, err := a.kafkaListeners()
	if err != nil {
		return nil, err
	}
	eps := []serving.Endpoint{
		{Name: "http", Kind: "http", TLS: a.cfg.Listen.HTTPTLS, ALPN: []string{"http/1.1"}},
		{Name: "remoting", Kind: "remoting", TLS: a.cfg.Listen.RemotingTLS},
		{Name: "grpc", Kind: "grpc", TLS: a.cfg.Listen.GRPCTLS, ALPN: []string{"h2"}},
		{Name: "pulsar", Kind: "pulsar", TLS: a.cfg.Listen.PulsarTLS},
		{Name: "pulsar-ssl", Kind: "pulsar", TLS: "enforcing"},
		{Name: "mqtt", Kind: "mqtt", TLS: a.cfg.Listen.MQTTTLS},
		{Name: "mqtt-ssl", Kind: "mqtt", TLS: "enforcing"},
	}
	pulsarSSL := a.cfg.Listen.PulsarSSL
	if a.cfg.Listen.PulsarTLS == "disabled" || a.cfg.Listen.Pulsar == "" {
		pulsarSSL = ""
	}
	mqttSSL := a.cfg.Listen.MQTTSSL
	if a.cfg.Listen.MQTTTLS == "disabled" {
		mqttSSL = ""
	}
	addrs := []string{a.cfg.Listen.HTTP, a.cfg.Listen.Remoting, a.cfg.Listen.GRPC, a.cfg.Listen.Pulsar, pulsarSSL, a.cfg.Listen.MQTT, mqttSSL}
	for _, k := range kafkaSpecs {
		eps = append(eps, serving.Endpoint{Name: k.name, Kind: "kafka", TLS: k.tls, Kafka: &k.listener})
		addrs = append(addrs, k.addr)
	}
	var opened []serving.Endpoint
	for i, ep := range eps {
		if addrs[i] == "" {
			continue
		}
		if ep.Name == "pulsar-ssl" && a.member != nil {
			// Group g's Pulsar port is the listener's + g, which the
			// TLS-only port would take: members take pulsar+ssl://
			// clients on the Pulsar port.
			a.log.Warn("cluster members serve pulsar+ssl:// on the Pulsar port (listen.pulsar), not listen.pulsar_ssl", "listen.pulsar_ssl", addrs[i])
			continue
		}
		l, err := a.listen(ep.Name, addrs[i])
		if err != nil {
			for _, o := range opened {
				o.Raw.Close()
			}
			return nil, err
		}
		ep.Raw = l
		opened = append(opened, ep)
	}
	if a.member != nil {
		a.baseEndpoints = opened
		var more []serving.Endpoint
		var err error
		for g := 1; g < len(a.member.Groups()) && err == nil; g++ {
			var eps []serving.Endpoint
			eps, err = a.groupEndpoints(g)
			more = append(more, eps...)
		}
		if err != nil {
			for _, o := range append(opened, more...) {
				o.Raw.Close()
			}
			return nil, err
		}
		opened = append(opened, more...)
	}
	if len(kafkaSpecs) > 0 && kafkaSpecs[0].name != "kafka" {
		a.mu.Lock()
		a.listeners["kafka"] = a.listeners[kafkaSpecs[0].name]
		a.mu.Unlock()
	}
	return opened, nil
}

// Run serves until ctx ends, then shuts down gracefully: listeners stop
// accepting, in-flight work drains, state is checkpointed and files close,
// all within the configured shutdown timeout.
func (a *App) Run(ctx context.Context, ready func()) error {
	if a.cfg.protocolNode() {
		return a.runProtocol(ctx, ready)
	}
	eps, err := a.openEndpoints()
	if err != nil {
		return errors.Join(err, a.close())
	}
	var stopping atomic.Int64 // when ctx ended (unix ns)
	stop := context.AfterFunc(ctx, func() { stopping.Store(time.Now().UnixNano()) })
	defer stop()
	if a.member != nil {
		err = a.node.RunMember(ctx, ready, eps, a.runNode)
	} else {
		err = a.node.RunSingle(ctx, ready, eps, a.runNode)
	}
	if cerr := a.close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	a.log.Info("stopped", "took", time.Since(time.Unix(0, stopping.Load())))
	return err
}

// runNode starts what runs for the node's whole life, whatever it leads.
func (a *App) runNode(ctx context.Context, g *errgroup.Group) {
	if a.membership != nil {
		// A node fenced by a newer incarnation of itself stops serving (one
		// whose lease ended registers again).
		g.Go(func() error {
			select {
			case <-ctx.Done():
				return nil
			case <-a.membership.Lost():
				return a.membership.Err()
			}
		})
	}
	g.Go(func() error { memory.ReturnIdle(ctx, a.log); return nil })
	g.Go(func() error { a.security.Run(ctx); return nil })
}

// close releases everything in reverse order of construction.
func (a *App) close() error {
	var errs []error
	if a.node != nil {
		errs = append(errs, a.node.Close())
	}
	errs = append(errs, a.closeBase())
	return errors.Join(errs...)
}

// closeBase releases what New built below the stack (whatever of it
// exists).
func (a *App) closeBase() error {
	var errs []error
	step := func(name string, fn func() error) {
		start := time.Now()
		errs = append(errs, fn())
		a.log.Debug("closed", "what", name, "took", time.Since(start))
	}
	if a.member != nil {
		step("replica", func() error { a.member.Stop(); return nil })
	}
	if a.membership != nil {
		step("membership", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return a.membership.Leave(ctx)
		})
	}
	if a.meta != nil {
		step("metadata", a.meta.Close)
	}
	if a.engine != nil {
		step("storage", a.engine.Close)
	}
	if a.member != nil {
		step("group storage", a.member.CloseEngines)
		step("etcd", func() error { a.member.CloseEtcd(); return nil })
	}
	if a.tracer != nil {
		step("telemetry", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			return a.tracer.Shutdown(ctx)
		})
	}
	return errors.Join(errs...)
}

// tlsListener serves TLS on a listener per its mode (tlsmux.Wrap) with
// the configured certificate.
func (a *App) tlsListener(name string, l net.Listener, mode string, alpn ...string) (net.Listener, error) {
	t := a.cfg.TLS
	return tlsmux.Wrap(name, l, mode, tlsmux.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientAuth: t.ClientAuth, ClientCAFile: t.ClientCAFile}, a.log, alpn...)
}

// StateDump renders the state the node's log determines (broker state and
// idempotent-producer states) in a stable text form, for replay-equivalence
// tests.
func (a *App) StateDump() (string, error) {
	st := a.node.Stack(0)
	if st == nil {
		return "", fmt.Errorf("%w: this node does not lead its group", model.ErrNotLeader)
	}
	return st.StateDump()
}
