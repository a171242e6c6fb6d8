package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/meta/etcdembed"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
)

// A cluster member (cluster.members): every member runs an etcd member for
// the metadata (unless cluster.etcd_endpoints names an external etcd) and
// a replica of one replication group holding every queue, replicated with
// Raft. The member that leads the group serves clients: it builds the
// broker from the log (as a restart does) when it becomes leader and
// drops it when leadership ends. The others accept clients on the same
// ports and relay each connection to the leader's same port, so any
// member's address works for every client. When leadership moves, a
// connection on which nothing was answered yet moves to the new leader
// (relay.go, clientconn.go); the others close, and clients reconnect.

// replica is the node's replica of the log and what runs with it.
type replica struct {
	members   map[model.NodeID]string
	self      model.NodeID
	etcd      *etcdembed.Embedded
	handoff   *replication.Handoff
	transport *replication.TCPTransport
	group     *replication.Group
	relays    relaySet
	pki       *clusterPKI // the embedded etcd's certificates (cluster.tls)
}

// replicated says whether the node is a member of a replicated cluster.
func (a *App) replicated() bool { return a.cfg.Cluster.Members != "" }

// sortedIDs returns the ids of members in order.
func sortedIDs(members map[model.NodeID]string) []model.NodeID {
	ids := make([]model.NodeID, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// prepareReplica starts the embedded etcd member (unless the cluster uses
// an external etcd) and sets the engine up as a replica. It runs before
// the metadata store and the engine open.
func (a *App) prepareReplica(ctx context.Context, sc *storage.Config) error {
	members, err := a.cfg.Cluster.members()
	if err != nil {
		return err
	}
	r := &replica{members: members, self: model.NodeID(a.cfg.NodeID), handoff: replication.NewHandoff()}
	a.replica = r
	sc.Replicated = true
	sc.OnWritten = r.handoff.Written
	if a.cfg.Cluster.EtcdEndpoints != "" {
		return nil
	}
	scheme := a.etcdScheme()
	if a.cfg.Cluster.TLS {
		if r.pki, err = makeClusterPKI(filepath.Join(a.cfg.DataDir, "cluster-tls"), a.cfg.Cluster.Name, a.cfg.Cluster.Secret, members[r.self]); err != nil {
			return err
		}
	}
	peerURL := func(host string) string {
		return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.EtcdPort+1))
	}
	initial := map[string]string{}
	for id, host := range members {
		initial[fmt.Sprintf("node-%d", id)] = peerURL(host)
	}
	host := members[r.self]
	if err := checkEtcdScheme(filepath.Join(a.cfg.DataDir, "etcd"), scheme); err != nil {
		return err
	}
	a.log.Info("starting the embedded etcd member", "members", len(members))
	r.etcd, err = etcdembed.StartEmbedded(ctx, etcdembed.EmbeddedConfig{
		Name:           fmt.Sprintf("node-%d", r.self),
		Dir:            filepath.Join(a.cfg.DataDir, "etcd"),
		ClientURL:      scheme + "://" + net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.EtcdPort)),
		PeerURL:        peerURL(host),
		InitialCluster: initial,
		ClusterToken:   a.cfg.Cluster.Name,
		TLSCA:          r.pki.ca(),
		TLSCert:        r.pki.cert(),
		TLSKey:         r.pki.key(),
		Logger:         a.log,
	})
	return err
}

// startReplica connects to the other members and starts the node's replica
// of the group.
func (a *App) startReplica() error {
	r := a.replica
	peers := map[model.NodeID]string{}
	for id, host := range r.members {
		peers[id] = net.JoinHostPort(host, strconv.Itoa(a.cfg.Cluster.RaftPort))
	}
	t, err := replication.NewTCPTransport(replication.TCPConfig{Cluster: a.cfg.Cluster.Name, Node: r.self,
		Listen: peers[r.self], Peers: peers, LocalHost: r.members[r.self], Secret: a.cfg.Cluster.Secret, TLS: a.cfg.Cluster.TLS, Logger: a.log})
	if err != nil {
		return err
	}
	r.transport = t
	r.group, err = replication.Start(replication.Config{
		Node:      r.self,
		Voters:    sortedIDs(r.members),
		Dir:       filepath.Join(a.cfg.DataDir, "raft"),
		Engine:    a.engine,
		Handoff:   r.handoff,
		Transport: t,
		OnRoleChange: func(model.NodeID, model.Term) {
			r.relays.closeUpstreams() // relayed connections follow the leader
		},
		Logger: a.log,
	})
	if err != nil {
		t.Close()
		r.transport = nil
		return err
	}
	t.Register(r.group)
	a.metrics.Registry.MustRegister(newReplicaCollector(r))
	return nil
}

// stop stops the replica (the engine stays open).
func (r *replica) stop() {
	if r.group != nil {
		r.group.Stop()
	}
	if r.transport != nil {
		r.transport.Close()
	}
	r.relays.closeAll()
}

func (r *replica) closeEtcd() {
	if r.etcd != nil {
		r.etcd.Close()
	}
}

// leaderHost returns the host of the node leading the group ("" while
// none is known or this node leads).
func (r *replica) leaderHost() (model.NodeID, string) {
	l, _ := r.group.Leader()
	if l == 0 {
		return 0, ""
	}
	return l, r.members[l]
}

// kafkaCluster describes the cluster to Kafka clients (nil on a single
// node).
func (a *App) kafkaCluster() func() *kafka.ClusterView {
	r := a.replica
	if r == nil {
		return nil
	}
	hosts := map[int32]string{}
	var voters []int32
	for _, id := range sortedIDs(r.members) {
		hosts[int32(id)] = r.members[id]
		voters = append(voters, int32(id))
	}
	return func() *kafka.ClusterView {
		st := r.group.Status()
		v := &kafka.ClusterView{Hosts: hosts, Leader: int32(st.Leader), Replicas: voters}
		if st.Leader == 0 {
			v.Leader = -1
		}
		// In sync: the replicas the leader knows hold everything
		// committed (within a small margin: a batch in flight).
		for _, p := range st.Replicas {
			if p.Lag <= 1024 {
				v.ISR = append(v.ISR, int32(p.Node))
			}
		}
		if len(v.ISR) == 0 {
			v.ISR = []int32{int32(r.self)}
		}
		return v
	}
}

// electLeader moves the group's leadership to a node (Kafka's preferred
// leader election); nil on a single node.
func (a *App) electLeader() func(ctx context.Context, node int32) error {
	r := a.replica
	if r == nil {
		return nil
	}
	return func(ctx context.Context, node int32) error {
		if _, ok := r.members[model.NodeID(node)]; !ok {
			return fmt.Errorf("no member %d", node)
		}
		if err := r.group.TransferLeadership(ctx, model.NodeID(node)); err != nil {
			return err
		}
		a.log.Info("leadership moved by a preferred leader election", "to", node)
		return nil
	}
}

// relayedAdvertise points RocketMQ clients that reached the leader through
// another member's relay back at that member (its host, the same port):
// their routes then keep working when leadership moves, since the member
// relays to whichever node leads, and remoting clients refresh routes only
// every 30 s. Nil on a single node.
func (a *App) relayedAdvertise() func(local, remote net.Addr) string {
	r := a.replica
	if r == nil {
		return nil
	}
	byHost := map[string]bool{}
	for id, h := range r.members {
		if id != r.self {
			byHost[h] = true
		}
	}
	return func(local, remote net.Addr) string {
		rh, _, err := net.SplitHostPort(remote.String())
		if err != nil || !byHost[rh] {
			return ""
		}
		_, port, err := net.SplitHostPort(local.String())
		if err != nil {
			return ""
		}
		return net.JoinHostPort(rh, port)
	}
}

// route hands a listener's connections to the term's servers while this
// node leads (the listener a stack serves), and relays them to the
// leader otherwise.
type route struct {
	ep      endpoint
	current atomic.Pointer[connListener]
}

// runReplicated serves as a cluster member until ctx ends.
func (a *App) runReplicated(ctx context.Context, ready func(), eps []endpoint) error {
	g, gctx := errgroup.WithContext(ctx)
	a.runNode(gctx, g)
	handler := &switchHandler{}
	handler.set(admin.StandbyHandler(a.metrics, a.log, admin.Security{Service: a.security, Quotas: a.quotas}, a.clusterStatus, a.leaderHTTP))
	var httpSrv *http.Server
	var routes []*route
	for _, ep := range eps {
		if ep.name == "http" {
			l, err := a.tlsListener(ep.name, ep.raw, ep.tls, ep.alpn...)
			if err != nil {
				return errors.Join(err, a.close())
			}
			httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
			g.Go(func() error {
				if err := httpSrv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
					return fmt.Errorf("http: %w", err)
				}
				return nil
			})
			continue
		}
		rt := &route{ep: ep}
		routes = append(routes, rt)
		g.Go(func() error { return a.acceptRoute(gctx, rt) })
	}
	g.Go(func() error { return a.leadLoop(gctx, routes, handler) })
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	start := time.Now()
	a.log.Info("shutting down")
	a.handOffLeadership()
	for _, rt := range routes {
		rt.ep.raw.Close()
	}
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	if httpSrv != nil {
		_ = httpSrv.Shutdown(sctx)
	}
	err := g.Wait()
	a.log.Debug("servers stopped", "took", time.Since(start))
	if cerr := a.close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	a.log.Info("stopped", "took", time.Since(start))
	return err
}

// handOffLeadership moves the group's leadership to a caught-up replica
// before this node stops, so clients fail over within a round trip
// rather than an election timeout.
func (a *App) handOffLeadership() {
	r := a.replica
	st := r.group.Status()
	if st.Leader != r.self {
		return
	}
	var to model.NodeID
	best := uint64(0)
	for _, p := range st.Replicas {
		if p.Node != r.self && p.Match >= best {
			to, best = p.Node, p.Match
		}
	}
	if to == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.group.TransferLeadership(ctx, to); err != nil {
		a.log.Warn("leadership hand-off", "to", to, "err", err)
		return
	}
	a.log.Info("handed leadership off", "to", to)
}

// leadLoop builds a stack when the node's engine opens as leader and drops
// it when leadership ends.
func (a *App) leadLoop(ctx context.Context, routes []*route, handler *switchHandler) error {
	r := a.replica
	var cur *term
	standby := handler.get()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var retryAt, stepDownAt time.Time
	for {
		select {
		case <-ctx.Done():
			if cur != nil {
				a.endTerm(cur, routes, handler, standby)
			}
			return nil
		case <-tick.C:
		}
		leading := r.group.Writable()
		if leading && a.engine.DiskFull() && time.Now().After(stepDownAt) {
			// A leader whose disk guard refuses writes would stall the
			// group: a follower with room takes over.
			a.log.Warn("disk guard refuses writes: handing leadership off")
			a.handOffLeadership()
			stepDownAt = time.Now().Add(10 * time.Second)
			continue
		}
		switch {
		case leading && cur == nil && time.Now().After(retryAt):
			t, err := a.startTerm(ctx, routes, handler)
			if err != nil {
				a.log.Error("serving as leader failed; retrying", "err", err)
				retryAt = time.Now().Add(time.Second)
				continue
			}
			cur = t
		case !leading && cur != nil:
			a.endTerm(cur, routes, handler, standby)
			cur = nil
		}
		if err := r.group.Err(); err != nil {
			return fmt.Errorf("replica: %w", err)
		}
	}
}

// term is what serves clients during one leadership.
type term struct {
	st      *stack
	cancel  context.CancelFunc
	g       *errgroup.Group
	started time.Time
}

// startTerm builds the broker from the log and starts the protocol servers
// over the node's listeners.
func (a *App) startTerm(ctx context.Context, routes []*route, handler *switchHandler) (*term, error) {
	start := time.Now()
	// State machines are rebuilt from the log alone: the checkpoint
	// sections the engine opened with may predate records applied since.
	a.engine.DropOpenedSections()
	tctx, cancel := context.WithCancel(ctx)
	st, err := a.newStack(tctx)
	if err != nil {
		cancel()
		return nil, err
	}
	var fe frontEnds
	var cls []*connListener
	for _, rt := range routes {
		cl := newConnListener(rt.ep.raw.Addr())
		l, err := a.tlsListener(rt.ep.name, cl, rt.ep.tls, rt.ep.alpn...)
		if err != nil {
			cancel()
			st.close()
			return nil, err
		}
		switch {
		case rt.ep.name == "remoting":
			fe.remoting = l
		case rt.ep.name == "grpc":
			fe.grpc = l
		case rt.ep.kafka != nil:
			fe.kafka = append(fe.kafka, l)
			fe.kafkaLis = append(fe.kafkaLis, *rt.ep.kafka)
		}
		cls = append(cls, cl)
	}
	g, gctx := errgroup.WithContext(tctx)
	a.serve(gctx, g, st, fe, task.NewByteBudget(int64(a.cfg.Limits.MaxBytesInFlight)))
	a.stack.Store(st)
	for i, rt := range routes {
		rt.current.Store(cls[i])
	}
	m := a.metrics.Term()
	admin.RegisterPopMetrics(m.Registry, st.pop)
	handler.set(admin.Handler(st.broker, st.txns, m, a.log, admin.Security{Service: a.security, Quotas: a.quotas}, a.clusterStatus, st.members, st.history))
	_, tm := a.replica.group.Leader()
	a.log.Info("leading: serving clients", "term", tm, "took", time.Since(start))
	return &term{st: st, cancel: cancel, g: g, started: time.Now()}, nil
}

// endTerm stops serving: new connections relay again, the term's
// connections close and its broker stops.
func (a *App) endTerm(t *term, routes []*route, handler *switchHandler, standby http.Handler) {
	for _, rt := range routes {
		if cl := rt.current.Swap(nil); cl != nil {
			cl.Close()
		}
	}
	handler.set(standby)
	a.stack.Store(nil)
	t.cancel()
	if err := t.g.Wait(); err != nil {
		a.log.Warn("servers of the ended term", "err", err)
	}
	if err := t.st.close(); err != nil {
		a.log.Warn("closing the ended term's broker", "err", err)
	}
	// Checkpoints stop capturing the closed broker's state machines.
	a.engine.DropOpenedSections()
	a.log.Info("no longer leading: relaying clients to the leader", "served", time.Since(t.started).Round(time.Millisecond))
}

// leaderHTTP is the leader's admin address ("" while unknown).
func (a *App) leaderHTTP() string {
	_, host := a.replica.leaderHost()
	if host == "" || a.cfg.Listen.HTTP == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(a.cfg.Listen.HTTP)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// switchHandler serves through whichever handler is current.
type switchHandler struct{ h atomic.Pointer[http.Handler] }

func (s *switchHandler) set(h http.Handler) { s.h.Store(&h) }
func (s *switchHandler) get() http.Handler  { return *s.h.Load() }
func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.get().ServeHTTP(w, r)
}

// connListener is a net.Listener fed with connections another accept loop
// took.
type connListener struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to Accept; false once the listener is closed.
func (l *connListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next delivered connection.
func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and deliver.
func (l *connListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

// isClosed reports whether Close was called (the term ended).
func (l *connListener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Addr is the real listener's address.
func (l *connListener) Addr() net.Addr { return l.addr }
