package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
)

// listenerRoute hands a listener's connections to the term's servers while this
// node leads the listener's group (the listener a stack serves), and
// relays them to the group's leader otherwise.
type listenerRoute struct {
	ep      endpoint
	grp     *groupReplica
	relays  *relaySet // where its relayed connections are tracked
	current atomic.Pointer[connListener]
}

// runReplicated serves as a cluster member until ctx ends.
func (a *App) runReplicated(ctx context.Context, ready func(), eps []endpoint) error {
	r := a.replica
	g, gctx := errgroup.WithContext(ctx)
	a.runNode(gctx, g)
	g.Go(func() error { a.watchMembers(gctx); return nil })
	handler := &switchHandler{}
	// A member not leading group 0 answers the admin API through the one
	// that does (its node endpoints here).
	asker := admin.GroupAsker{Groups: len(r.groups), Ask: a.askAdmin}
	handler.set(admin.StandbyHandler(a.metrics, a.log, admin.Security{Service: a.security, Quotas: a.quotas}, a.clusterOps(), a.leaderHTTP,
		admin.Spanning(admin.Forward(asker, 0), asker)))
	var httpSrv *http.Server
	routes := make([][]*listenerRoute, len(r.groups))
	var kafkaRoutes []*listenerRoute
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
		rt := &listenerRoute{ep: ep, grp: r.groups[ep.group], relays: &r.groups[ep.group].relays}
		if ep.kafka != nil {
			rt.relays = &r.kafkaRelays
			// One Kafka server answers for every group this member leads.
			kafkaRoutes = append(kafkaRoutes, rt)
		} else {
			routes[ep.group] = append(routes[ep.group], rt)
		}
		g.Go(func() error { return a.acceptRoute(gctx, rt) })
	}
	// One request byte budget for every term's front-ends.
	budget := task.NewByteBudget(int64(a.cfg.Limits.MaxBytesInFlight))
	front := a.newKafkaFront(gctx, kafkaRoutes, budget)
	hs := &hosting{a: a, ctx: gctx, g: g, routes: routes, front: front, handler: handler, budget: budget,
		running: map[model.GroupID]*hostedRun{}, busy: map[model.GroupID]bool{}}
	for _, gr := range r.groups {
		if lr := gr.hosted(); lr != nil {
			hs.lead(gr, lr)
		}
	}
	g.Go(func() error { hs.tend(gctx); return nil })
	g.Go(func() error { a.watchLeaders(gctx); return nil })
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	start := time.Now()
	a.log.Info("shutting down")
	a.leaveEarly()
	a.handOffLeadership()
	for _, rts := range append(routes, kafkaRoutes) {
		for _, rt := range rts {
			rt.ep.raw.Close()
		}
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

// leaveEarly ends the node's registration before it hands its groups off,
// so the members taking them over do not hand them back to it as their
// preferred leader while it stops.
func (a *App) leaveEarly() {
	if a.membership == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.membership.Leave(ctx); err != nil {
		a.log.Warn("leaving the cluster's registry", "err", err)
	}
}

// handOffLeadership moves the leadership of every group this node leads
// to a caught-up replica before it stops, so clients fail over within a
// round trip rather than an election timeout.
func (a *App) handOffLeadership() {
	var wg sync.WaitGroup
	for _, gr := range a.replica.groups {
		lr := gr.hosted()
		if lr == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.handOffGroup(gr, lr)
		}()
	}
	wg.Wait()
}

// handOffGroup moves one group's leadership to its most caught-up replica
// if this node leads it: one Raft is replicating to (a replica it only
// probes may be cut off or down, and a hand-off to it would hold the
// group's appends until it is given up).
func (a *App) handOffGroup(gr *groupReplica, lr *localReplica) {
	r := a.replica
	st := lr.raft.Status()
	if st.Leader != r.self {
		return
	}
	var to model.NodeID
	best := uint64(0)
	for _, p := range st.Replicas {
		if p.Node != r.self && !p.Learner && p.State == "replicate" && p.Match >= best {
			to, best = p.Node, p.Match
		}
	}
	if to == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := lr.raft.TransferLeadership(ctx, to); err != nil {
		a.log.Warn("leadership hand-off", "group", gr.id, "to", to, "err", err)
		return
	}
	a.log.Info("handed leadership off", "group", gr.id, "to", to)
}

// leadLoop builds a group's stack when the node's replica opens as its
// leader and drops it when leadership ends. handler, for group 0, serves
// the admin API. The leader's housekeeping runs beside it (tendGroup), so
// that a slow metadata call or hand-off never delays the end of a term.
func (a *App) leadLoop(ctx context.Context, gr *groupReplica, lr *localReplica, routes []*listenerRoute, front *kafkaFront, handler *switchHandler, budget *task.ByteBudget) error {
	var cur *term
	var standby http.Handler
	if handler != nil {
		standby = handler.get()
	}
	tctx, stopTending := context.WithCancel(ctx)
	tended := make(chan struct{})
	go func() { defer close(tended); a.tendGroup(tctx, gr, lr) }()
	defer func() { stopTending(); <-tended }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var retryAt time.Time
	for {
		select {
		case <-ctx.Done():
			if cur != nil {
				a.endTerm(cur, gr, lr, routes, front, handler, standby)
			}
			return nil
		case <-tick.C:
		}
		leading := lr.raft.Writable()
		// A leader holding appends (a hand-off or a membership change
		// under way) still leads its term: its stack stays.
		_, raftTerm := lr.raft.Leader()
		leads := lr.raft.Leads()
		switch {
		case leading && cur == nil && time.Now().After(retryAt):
			t, err := a.startTerm(ctx, gr, lr, routes, front, handler, budget)
			if err != nil {
				a.log.Error("serving as leader failed; retrying", "group", gr.id, "err", err)
				retryAt = time.Now().Add(time.Second)
				continue
			}
			cur = t
		case cur != nil && (!leads || raftTerm != cur.raftTerm):
			a.endTerm(cur, gr, lr, routes, front, handler, standby)
			cur = nil
		}
		if err := lr.raft.Err(); err != nil {
			return fmt.Errorf("replica of group %d: %w", gr.id, err)
		}
	}
}

// tendGroup does a group leader's housekeeping until ctx ends: it hands
// the group off when its disk guard refuses writes, keeps the group's
// membership as the cluster's and hands the group to its preferred member.
func (a *App) tendGroup(ctx context.Context, gr *groupReplica, lr *localReplica) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var stepDownAt, balanceAt, membersAt, publishAt time.Time
	balanceWait := balanceInterval
	var published string         // the group membership last published
	var publishedTerm model.Term // the term this member last published itself the leader of
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !lr.raft.Writable() {
			continue
		}
		if _, tm := lr.raft.Leader(); tm != publishedTerm && time.Now().After(publishAt) {
			if err := a.publishLeader(ctx, gr, tm); err != nil {
				a.log.Info("publishing the group's leader failed", "group", gr.id, "err", err)
				publishAt = time.Now().Add(membershipInterval) // etcd out of reach: not on every tick
			} else {
				publishedTerm = tm
			}
		}
		if lr.engine.DiskFull() && time.Now().After(stepDownAt) {
			// A leader whose disk guard refuses writes would stall the
			// group: a follower with room takes over.
			a.log.Warn("disk guard refuses writes: handing leadership off", "group", gr.id)
			a.handOffGroup(gr, lr)
			stepDownAt = time.Now().Add(10 * time.Second)
			continue
		}
		if time.Now().After(membersAt) {
			membersAt = time.Now().Add(membershipInterval)
			a.reconcileMembers(ctx, gr, lr, &published)
		}
		if time.Now().After(balanceAt) {
			if a.balance(ctx, gr, lr) {
				balanceWait = min(2*balanceWait, balanceBackoff)
			} else {
				balanceWait = balanceInterval
			}
			balanceAt = time.Now().Add(balanceWait)
		}
	}
}

// termCommitWait bounds how long a new leader waits for the records it
// holds to be committed before it builds its state machines.
const termCommitWait = 10 * time.Second

// waitTermCommitted waits until everything the engine holds is committed.
// A new leader's log may end in records of earlier terms that it cannot
// count as committed until a record of its own term is: readers (and the
// state machines built from the log: offsets, POP leases, timers,
// transactions) see only committed records, so a stack built before then
// would start from a state missing the last leader's final records, and
// the state machines that apply their records as they write them would
// never apply those.
func waitTermCommitted(ctx context.Context, e *storage.Engine) error {
	tk := e.Ticket()
	ctx, cancel := context.WithTimeout(ctx, termCommitWait)
	defer cancel()
	if err := e.WaitDurable(ctx, e.WrittenEnd(), tk); err != nil {
		return fmt.Errorf("waiting for the log to be committed: %w", err)
	}
	return nil
}

// term is what serves clients during one leadership.
type term struct {
	raftTerm model.Term // the group's Raft term it serves
	st       *stack
	cancel   context.CancelFunc
	g        *errgroup.Group
	started  time.Time
	metrics  *admin.Metrics // the broker's, served while the term lasts
}

// startTerm builds the group's broker from the log and starts the
// protocol servers over its listeners.
func (a *App) startTerm(ctx context.Context, gr *groupReplica, lr *localReplica, routes []*listenerRoute, front *kafkaFront, handler *switchHandler, budget *task.ByteBudget) (*term, error) {
	start := time.Now()
	_, raftTerm := lr.raft.Leader()
	if err := waitTermCommitted(ctx, lr.engine); err != nil {
		return nil, err
	}
	// State machines are rebuilt from the log alone: the checkpoint
	// sections the engine opened with may predate records applied since.
	lr.engine.DropOpenedSections()
	tctx, cancel := context.WithCancel(ctx)
	st, err := a.newStack(tctx, a.groupParts(gr, lr))
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
		case rt.ep.kind == "remoting":
			fe.remoting = l
		case rt.ep.kind == "grpc":
			fe.grpc = l
		case rt.ep.kafka != nil:
			fe.kafka = append(fe.kafka, l)
			fe.kafkaLis = append(fe.kafkaLis, *rt.ep.kafka)
		}
		cls = append(cls, cl)
	}
	g, gctx := errgroup.WithContext(tctx)
	a.serve(gctx, g, st, fe, budget)
	if err := front.attach(int(gr.id), st); err != nil {
		cancel()
		_ = g.Wait()
		st.close()
		return nil, err
	}
	gr.stack.Store(st)
	for i, rt := range routes {
		rt.current.Store(cls[i])
	}
	// Every group's leader answers the admin API for its group; group 0's
	// also serves the node's endpoints and answers for the whole cluster,
	// asking the other groups' leaders.
	label := ""
	if len(a.replica.groups) > 1 {
		label = strconv.Itoa(int(gr.id))
	}
	m := a.metrics.Term(label)
	admin.RegisterPopMetrics(m.Registry, st.pop)
	groupAPI := admin.Handler(st.broker, st.txns, m, a.log, admin.Security{Service: a.security, Quotas: a.quotas}, a.clusterOps(), st.members, st.history)
	gr.admin.Store(&groupAPI)
	if handler != nil {
		handler.set(admin.Spanning(groupAPI, admin.GroupAsker{Groups: len(a.replica.groups), Ask: a.askAdmin}))
	}
	_, tm := lr.raft.Leader()
	a.log.Info("leading: serving clients", "group", gr.id, "term", tm, "took", time.Since(start))
	return &term{raftTerm: raftTerm, st: st, cancel: cancel, g: g, started: time.Now(), metrics: m}, nil
}

// endTerm stops serving: new connections relay again, the term's
// connections close and its broker stops.
func (a *App) endTerm(t *term, gr *groupReplica, lr *localReplica, routes []*listenerRoute, front *kafkaFront, handler *switchHandler, standby http.Handler) {
	front.detach(int(gr.id))
	for _, rt := range routes {
		if cl := rt.current.Swap(nil); cl != nil {
			cl.Close()
		}
	}
	if handler != nil {
		handler.set(standby)
	}
	gr.admin.Store(nil)
	gr.stack.Store(nil)
	t.metrics.Release()
	t.cancel()
	if err := t.g.Wait(); err != nil {
		a.log.Warn("servers of the ended term", "group", gr.id, "err", err)
	}
	if err := t.st.close(); err != nil {
		a.log.Warn("closing the ended term's broker", "group", gr.id, "err", err)
	}
	// Checkpoints stop capturing the closed broker's state machines.
	lr.engine.DropOpenedSections()
	a.log.Info("no longer leading: relaying clients to the leader", "group", gr.id, "served", time.Since(t.started).Round(time.Millisecond))
}

// leaderHTTP is group 0's leader's admin address ("" while unknown).
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

// groupEndpoints opens the RocketMQ listeners of groups 1.. (group g's on
// the remoting and gRPC ports + g, same host) beside the node's own.
func (a *App) groupEndpoints(base []endpoint) ([]endpoint, error) {
	var out []endpoint
	for g := 1; g < a.cfg.Cluster.groups(); g++ {
		for _, ep := range base {
			if ep.kind != "remoting" && ep.kind != "grpc" {
				continue
			}
			host, _, err := net.SplitHostPort(ep.raw.Addr().String())
			if err != nil {
				return out, err
			}
			port, ok := groupPort(ep.raw.Addr().String(), model.GroupID(g))
			if !ok {
				return out, fmt.Errorf("%s listener %s: no port for group %d", ep.name, ep.raw.Addr(), g)
			}
			name := ep.name + "/" + strconv.Itoa(g)
			l, err := a.listen(name, net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return out, err
			}
			gep := ep
			gep.name, gep.raw, gep.group = name, l, g
			out = append(out, gep)
		}
	}
	return out, nil
}
