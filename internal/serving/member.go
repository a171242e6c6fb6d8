package serving

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member"
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

// GroupState is the state a group's log checkpoints besides the broker's
// (the idempotent-producer and Kafka transaction indexes): the member
// runtime's State of a group's replica.
type GroupState struct {
	Producers *producers.Manager
	KafkaTxns *producers.TxnIndex
}

// Keepers are the state's checkpointed sections.
func (s *GroupState) Keepers() []storage.StateKeeper {
	return []storage.StateKeeper{s.Producers, s.KafkaTxns}
}

// Endpoint is one opened listener: its name ("http", "kafka",
// "kafka/<NAME>", "remoting", "grpc", "pulsar", "mqtt", "mqtt-ssl";
// "remoting/<g>", "grpc/<g>" and "pulsar/<g>" for replication group g's;
// MQTT's are group 0's), its kind (the name without the group), the group
// it serves, its TLS mode and ALPN protocols, and for Kafka the listener it
// is.
type Endpoint struct {
	Name, Kind, TLS string
	Group           int
	ALPN            []string
	Raw             net.Listener
	Kafka           *kafka.Listener
}

// groupServing is what serves one group's clients while this member
// leads it.
type groupServing struct {
	// stack is the group's broker stack.
	stack *atomic.Pointer[Stack]
	// admin is the admin API over the group's broker (what the
	// cluster-wide API asks).
	admin atomic.Pointer[http.Handler]
}

// listenerRoute is one of the member's listeners: an endpoint and its
// route to the term's servers or to the group's leader.
type listenerRoute struct {
	ep Endpoint
	*relay.Route
}

// server is the member's Server: it serves a group's clients during each
// of its terms.
type server struct {
	n *Node
	// routes are each group's RocketMQ and Pulsar listeners (grown as groups are
	// added); eg and ctx own their accept loops.
	routesMu sync.Mutex
	routes   map[model.GroupID][]*listenerRoute
	eg       *errgroup.Group
	ctx      context.Context
	front    *kafkaFront
	handler  *switchHandler // the admin API (group 0's leader serves it whole)
	standby  http.Handler   // the admin API while group 0 is led elsewhere
	budget   *task.ByteBudget
}

// RunMember serves as a cluster member over its opened endpoints until ctx
// ends, with what runs for the node's whole life (also) beside it; at the
// end it hands its groups off and stops its servers (the caller closes
// what it opened).
func (n *Node) RunMember(ctx context.Context, ready func(), eps []Endpoint, also func(context.Context, *errgroup.Group)) error {
	m := n.Member
	g, gctx := errgroup.WithContext(ctx)
	handler := &switchHandler{}
	// A member not leading group 0 answers the admin API through the one
	// that does (its node endpoints here).
	asker := admin.GroupAsker{Groups: n.groupCount, Ask: n.askAdmin}
	handler.set(admin.StandbyHandler(n.Metrics, n.log, n.Security, n.Cluster, n.leaderHTTP,
		admin.Spanning(admin.Forward(asker, 0), asker)))
	var httpSrv *http.Server
	srv := &server{n: n, routes: map[model.GroupID][]*listenerRoute{}, eg: g, ctx: gctx, handler: handler}
	var kafkaRoutes []*listenerRoute
	for _, ep := range eps {
		if ep.Name == "http" {
			l, err := n.TLS(ep.Name, ep.Raw, ep.TLS, ep.ALPN...)
			if err != nil {
				return err
			}
			httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
			g.Go(func() error { return serveHTTP(httpSrv, l) })
			continue
		}
		if rt := srv.route(ep); rt != nil {
			kafkaRoutes = append(kafkaRoutes, rt)
		}
	}
	also(gctx, g)
	// One request byte budget for every term's front-ends.
	srv.budget = task.NewByteBudget(n.MaxBytesInFlight)
	srv.front, srv.standby = n.newKafkaFront(gctx, kafkaRoutes, srv.budget), handler.get()
	g.Go(func() error { return m.Run(gctx, srv) })
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	start := time.Now()
	n.log.Info("shutting down")
	if n.Leave != nil {
		// The registration ends before the groups are handed off, so
		// the members taking them over do not hand them back to this
		// one as their preferred leader while it stops.
		n.Leave()
	}
	m.HandOff()
	for _, rt := range kafkaRoutes {
		rt.ep.Raw.Close()
	}
	srv.closeRoutes()
	return n.shutdown(g, httpSrv, start)
}

// route starts relaying an opened listener to its group's leader until a
// term serves it; a Kafka listener's route is returned (one Kafka server
// answers for every group the member leads), a RocketMQ or Pulsar one kept as its
// group's.
func (s *server) route(ep Endpoint) *listenerRoute {
	m := s.n.Member
	gr := m.Groups()[ep.Group]
	rt := &listenerRoute{ep: ep, Route: &relay.Route{Name: ep.Name, Raw: ep.Raw, Leader: gr.Leader, Relays: gr.Relays()}}
	if ep.Kafka != nil {
		rt.Relays = m.KafkaRelays()
	} else {
		s.routesMu.Lock()
		s.routes[model.GroupID(ep.Group)] = append(s.routes[model.GroupID(ep.Group)], rt)
		s.routesMu.Unlock()
	}
	s.eg.Go(func() error { return m.Relayer().Accept(s.ctx, rt.Route) })
	if ep.Kafka != nil {
		return rt
	}
	return nil
}

// routesOf are group g's RocketMQ and Pulsar listener routes.
func (s *server) routesOf(g model.GroupID) []*listenerRoute {
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	return s.routes[g]
}

// closeRoutes closes every group's RocketMQ and Pulsar listeners.
func (s *server) closeRoutes() {
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	for _, rts := range s.routes {
		for _, rt := range rts {
			rt.ep.Raw.Close()
		}
	}
}

// Grow serves groups added to the cluster while the member runs: their
// listeners open and relay to each group's leader until this member leads
// one.
func (s *server) Grow(groups []*member.Group) {
	n := s.n
	n.growServing(len(n.Member.Groups()))
	for _, gr := range groups {
		eps, err := n.OpenGroup(int(gr.ID()))
		if err != nil {
			n.log.Error("opening the listeners of an added group", "group", gr.ID(), "err", err)
		}
		for _, ep := range eps {
			s.route(ep)
		}
	}
}

// term is what serves a group's clients during one of its terms.
type term struct {
	s       *server
	gr      *member.Group
	st      *Stack
	cancel  context.CancelFunc
	g       *errgroup.Group
	metrics *admin.Metrics // the broker's, served while the term lasts
}

// Serve builds the group's broker from the log and starts the protocol
// servers over its listeners.
func (s *server) Serve(ctx context.Context, gr *member.Group, r *member.Replica) (member.Serving, error) {
	n, id := s.n, gr.ID()
	tctx, cancel := context.WithCancel(ctx)
	// The broker loads its metadata with local reads (each load is
	// followed by a watch from its revision): a group whose leader died
	// with etcd's leader serves before etcd has elected another.
	st, err := n.NewStack(meta.LocalReads(tctx), n.groupParts(gr, r))
	if err != nil {
		cancel()
		return nil, err
	}
	var fe FrontEnds
	var cls []*relay.Listener
	routes := s.routesOf(id)
	for _, rt := range routes {
		cl := relay.NewListener(rt.ep.Raw.Addr())
		l, err := n.TLS(rt.ep.Name, cl, rt.ep.TLS, rt.ep.ALPN...)
		if err != nil {
			cancel()
			st.Close()
			return nil, err
		}
		switch rt.ep.Kind {
		case "remoting":
			fe.Remoting = l
		case "grpc":
			fe.GRPC = l
		case "pulsar":
			fe.Pulsar = l
		case "mqtt":
			if rt.ep.Name == "mqtt-ssl" {
				fe.MQTTSSL = l
			} else {
				fe.MQTT = l
			}
		}
		cls = append(cls, cl)
	}
	if fe.Pulsar != nil {
		fe.PulsarServer = n.pulsarServer(st)
	}
	// Group 0's leader serves the cluster's MQTT clients (its listeners
	// are group 0's): sessions and retained messages are in group 0's log.
	n.openMQTT(tctx, st, &fe)
	g, gctx := errgroup.WithContext(tctx)
	n.serve(gctx, g, st, fe, s.budget)
	if id == 0 {
		g.Go(func() error { n.resumeMoves(gctx, st.Broker); return nil })
		if n.BalanceQueues > 0 {
			g.Go(func() error { n.balanceQueues(gctx, st.Broker, n.BalanceQueues); return nil })
		}
	}
	if err := s.front.attach(int(id), st); err != nil {
		cancel()
		_ = g.Wait()
		st.Close()
		return nil, err
	}
	gs := n.groupServing(int(id))
	gs.stack.Store(st)
	for i, rt := range routes {
		rt.Serve(cls[i])
	}
	// Every group's leader answers the admin API for its group; group 0's
	// also serves the node's endpoints and answers for the whole cluster,
	// asking the other groups' leaders.
	label := ""
	if n.groupCount() > 1 {
		label = strconv.Itoa(int(id))
	}
	m := n.Metrics.Term(label)
	admin.RegisterPopMetrics(m.Registry, st.Pop)
	groupAPI := admin.Handler(st.Broker, st.Txns, m, n.log, n.Security, n.Cluster, st.Members, st.History)
	if fe.PulsarServer != nil {
		groupAPI = withPulsarAdmin(groupAPI, fe.PulsarServer.AdminHandler(n.Security.Guard))
	}
	if fe.MQTTServer != nil {
		groupAPI = withMQTT(groupAPI, fe.MQTTServer.WebSocketHandler(), fe.MQTTServer.AdminHandler(n.Security.Guard))
	}
	gs.admin.Store(&groupAPI)
	if id == 0 {
		s.handler.set(admin.Spanning(groupAPI, admin.GroupAsker{Groups: n.groupCount, Ask: n.askAdmin}))
	}
	return &term{s: s, gr: gr, st: st, cancel: cancel, g: g, metrics: m}, nil
}

// End stops serving: new connections relay again, the term's connections
// close and its broker stops.
func (t *term) End() {
	s, n, id := t.s, t.s.n, t.gr.ID()
	s.front.detach(int(id))
	for _, rt := range s.routesOf(id) {
		if cl := rt.Stop(); cl != nil {
			cl.Close()
		}
	}
	if id == 0 {
		s.handler.set(s.standby)
	}
	gs := n.groupServing(int(id))
	gs.admin.Store(nil)
	gs.stack.Store(nil)
	t.metrics.Release()
	t.cancel()
	if err := t.g.Wait(); err != nil {
		n.log.Warn("servers of the ended term", "group", id, "err", err)
	}
	if err := t.st.Close(); err != nil {
		n.log.Warn("closing the ended term's broker", "group", id, "err", err)
	}
}

// groupParts are a cluster member's stack parts for one of its groups.
func (n *Node) groupParts(gr *member.Group, r *member.Replica) Parts {
	state := r.State.(*GroupState)
	return Parts{Group: gr.ID(), Engine: r.Engine, Producers: state.Producers, KafkaTxns: state.KafkaTxns,
		Placement: route.Placement{Group: gr.ID(), Groups: max(n.Groups, 1), Spread: n.Member.GroupsOf}, BrokerName: n.groupBrokerName(gr.ID())}
}

// leaderHTTP is group 0's leader's admin address ("" while unknown).
func (n *Node) leaderHTTP() string {
	_, host := n.Member.LeaderHost()
	if host == "" || n.HTTPAddr == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(n.HTTPAddr)
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
