package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/member"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/member/relay"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
)

// A cluster member (cluster.members) runs the member runtime
// (internal/member): its etcd member, its replicas of the groups it hosts
// and the loops that start and end a group's serving period. This file is
// what serves clients during such a period — the group's broker built
// from its log, its protocol servers over the member's listeners — and
// how the listeners are shared: while the member serves a listener's
// group its connections go to the period's servers, otherwise they are
// relayed to the group's leader (member/relay).

// groupState is the state a group's log checkpoints besides the broker's
// (the idempotent-producer and Kafka transaction indexes).
type groupState struct {
	producers *producers.Manager
	kafkaTxns *producers.TxnIndex
}

// Keepers are the state's checkpointed sections.
func (s *groupState) Keepers() []storage.StateKeeper {
	return []storage.StateKeeper{s.producers, s.kafkaTxns}
}

// newGroupState makes a group's state (group 0's is the node's).
func (a *App) newGroupState(model.GroupID) member.State {
	return &groupState{producers: a.newProducers(), kafkaTxns: producers.NewTxnIndex()}
}

// newProducers makes an idempotent-producer state.
func (a *App) newProducers() *producers.Manager {
	return producers.New(a.meta, producers.Options{
		Expiration: a.cfg.Broker.ProducerIDExpiration,
		MaxStates:  a.cfg.Broker.MaxProducerStates,
		Logger:     a.log,
	})
}

// groupServing is what serves one group's clients while this member
// leads it.
type groupServing struct {
	// stack is the group's broker stack (group 0's is the App's).
	stack *atomic.Pointer[stack]
	// admin is the admin API over the group's broker (what the
	// cluster-wide API asks).
	admin atomic.Pointer[http.Handler]
}

// listenerRoute is one of the member's listeners: an endpoint and its
// route to the term's servers or to the group's leader.
type listenerRoute struct {
	ep endpoint
	*relay.Route
}

// server is the member's Server: it serves a group's clients during each
// of its terms.
type server struct {
	a       *App
	routes  [][]*listenerRoute
	front   *kafkaFront
	handler *switchHandler // the admin API (group 0's leader serves it whole)
	standby http.Handler   // the admin API while group 0 is led elsewhere
	budget  *task.ByteBudget
}

// runReplicated serves as a cluster member until ctx ends.
func (a *App) runReplicated(ctx context.Context, ready func(), eps []endpoint) error {
	m := a.member
	g, gctx := errgroup.WithContext(ctx)
	a.runNode(gctx, g)
	handler := &switchHandler{}
	// A member not leading group 0 answers the admin API through the one
	// that does (its node endpoints here).
	asker := admin.GroupAsker{Groups: len(m.Groups()), Ask: a.askAdmin}
	handler.set(admin.StandbyHandler(a.metrics, a.log, admin.Security{Service: a.security, Quotas: a.quotas}, a.clusterOps(), a.leaderHTTP,
		admin.Spanning(admin.Forward(asker, 0), asker)))
	var httpSrv *http.Server
	routes := make([][]*listenerRoute, len(m.Groups()))
	relayer := m.Relayer()
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
		gr := m.Groups()[ep.group]
		rt := &listenerRoute{ep: ep, Route: &relay.Route{Name: ep.name, Raw: ep.raw, Leader: gr.Leader, Relays: gr.Relays()}}
		if ep.kafka != nil {
			// One Kafka server answers for every group this member leads.
			rt.Relays = m.KafkaRelays()
			kafkaRoutes = append(kafkaRoutes, rt)
		} else {
			routes[ep.group] = append(routes[ep.group], rt)
		}
		g.Go(func() error { return relayer.Accept(gctx, rt.Route) })
	}
	// One request byte budget for every term's front-ends.
	budget := task.NewByteBudget(int64(a.cfg.Limits.MaxBytesInFlight))
	srv := &server{a: a, routes: routes, front: a.newKafkaFront(gctx, kafkaRoutes, budget), handler: handler, standby: handler.get(), budget: budget}
	g.Go(func() error { return m.Run(gctx, srv) })
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	start := time.Now()
	a.log.Info("shutting down")
	a.leaveEarly()
	m.HandOff()
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

// term is what serves a group's clients during one of its terms.
type term struct {
	s       *server
	gr      *member.Group
	st      *stack
	cancel  context.CancelFunc
	g       *errgroup.Group
	metrics *admin.Metrics // the broker's, served while the term lasts
}

// Serve builds the group's broker from the log and starts the protocol
// servers over its listeners.
func (s *server) Serve(ctx context.Context, gr *member.Group, r *member.Replica) (member.Serving, error) {
	a, id := s.a, gr.ID()
	tctx, cancel := context.WithCancel(ctx)
	// The broker loads its metadata with local reads (each load is
	// followed by a watch from its revision): a group whose leader died
	// with etcd's leader serves before etcd has elected another.
	st, err := a.newStack(meta.LocalReads(tctx), a.groupParts(gr, r))
	if err != nil {
		cancel()
		return nil, err
	}
	var fe frontEnds
	var cls []*relay.Listener
	for _, rt := range s.routes[id] {
		cl := relay.NewListener(rt.ep.raw.Addr())
		l, err := a.tlsListener(rt.ep.name, cl, rt.ep.tls, rt.ep.alpn...)
		if err != nil {
			cancel()
			st.close()
			return nil, err
		}
		switch rt.ep.kind {
		case "remoting":
			fe.remoting = l
		case "grpc":
			fe.grpc = l
		}
		cls = append(cls, cl)
	}
	g, gctx := errgroup.WithContext(tctx)
	a.serve(gctx, g, st, fe, s.budget)
	if err := s.front.attach(int(id), st); err != nil {
		cancel()
		_ = g.Wait()
		st.close()
		return nil, err
	}
	gs := a.serving[id]
	gs.stack.Store(st)
	for i, rt := range s.routes[id] {
		rt.Serve(cls[i])
	}
	// Every group's leader answers the admin API for its group; group 0's
	// also serves the node's endpoints and answers for the whole cluster,
	// asking the other groups' leaders.
	label := ""
	if len(a.serving) > 1 {
		label = strconv.Itoa(int(id))
	}
	m := a.metrics.Term(label)
	admin.RegisterPopMetrics(m.Registry, st.pop)
	groupAPI := admin.Handler(st.broker, st.txns, m, a.log, admin.Security{Service: a.security, Quotas: a.quotas}, a.clusterOps(), st.members, st.history)
	gs.admin.Store(&groupAPI)
	if id == 0 {
		s.handler.set(admin.Spanning(groupAPI, admin.GroupAsker{Groups: len(a.serving), Ask: a.askAdmin}))
	}
	return &term{s: s, gr: gr, st: st, cancel: cancel, g: g, metrics: m}, nil
}

// End stops serving: new connections relay again, the term's connections
// close and its broker stops.
func (t *term) End() {
	s, a, id := t.s, t.s.a, t.gr.ID()
	s.front.detach(int(id))
	for _, rt := range s.routes[id] {
		if cl := rt.Stop(); cl != nil {
			cl.Close()
		}
	}
	if id == 0 {
		s.handler.set(s.standby)
	}
	gs := a.serving[id]
	gs.admin.Store(nil)
	gs.stack.Store(nil)
	t.metrics.Release()
	t.cancel()
	if err := t.g.Wait(); err != nil {
		a.log.Warn("servers of the ended term", "group", id, "err", err)
	}
	if err := t.st.close(); err != nil {
		a.log.Warn("closing the ended term's broker", "group", id, "err", err)
	}
}

// groupParts are a cluster member's stack parts for one of its groups.
func (a *App) groupParts(gr *member.Group, r *member.Replica) stackParts {
	state := r.State.(*groupState)
	return stackParts{group: gr.ID(), engine: r.Engine, producers: state.producers, kafkaTxns: state.kafkaTxns,
		placement: route.Placement{Group: gr.ID(), Groups: len(a.serving)}, brokerName: a.groupBrokerName(gr.ID())}
}

// leaderHTTP is group 0's leader's admin address ("" while unknown).
func (a *App) leaderHTTP() string {
	_, host := a.member.LeaderHost()
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
			port, ok := placement.GroupPort(ep.raw.Addr().String(), model.GroupID(g))
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
