package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member"
	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/member/relay"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/serving"
)

// A protocol-only node (cluster.roles protocol) holds no data: it is a
// client of the members' etcd, registers itself, and relays each of its
// listeners' connections to the leader of the listener's group — group g's
// RocketMQ remoting, gRPC and Pulsar listeners on the ports + g, as the
// members have them — from its own host, so the leader answers routes naming the
// protocol-only nodes. Its admin API is group 0's leader's, proxied
// (/healthz and /metrics are its own).

// roleProtocol is cluster.roles for a protocol-only node.
const roleProtocol = "protocol"

// protocolNode says whether the configuration makes a protocol-only node.
func (c Config) protocolNode() bool { return c.Cluster.Roles == roleProtocol }

// newProtocol builds a protocol-only node: its cluster view, the metadata
// and its registration. Listeners open in Run.
func (a *App) newProtocol(ctx context.Context) (*App, error) {
	members, err := a.cfg.Cluster.members()
	if err != nil {
		return nil, err
	}
	host := a.cfg.Listen.Host
	if a.member, err = member.NewProtocol(ctx, member.Config{
		Self:          model.NodeID(a.cfg.NodeID),
		DataDir:       a.cfg.DataDir,
		Cluster:       a.cfg.Cluster.Name,
		Members:       members,
		EtcdEndpoints: etcdEndpointList(a.cfg.Cluster.EtcdEndpoints),
		EtcdPort:      a.cfg.Cluster.EtcdPort,
		RaftPort:      a.cfg.Cluster.RaftPort,
		Secret:        a.cfg.Cluster.Secret,
		TLS:           a.cfg.Cluster.TLS,
		MaxGroups:     maxGroups,
		Logger:        a.log,
		Protocol:      true,
		CallErrors:    serving.CallErrors,
	}, host); err != nil {
		return nil, err
	}
	// The members' etcd may still be forming (every node started at once).
	if a.meta, err = a.openMetaWaiting(ctx); err != nil {
		a.closeBase()
		return nil, err
	}
	if err := a.member.OpenProtocol(ctx, a.meta); err != nil {
		a.closeBase()
		return nil, err
	}
	if err := a.member.StartProtocol(); err != nil {
		a.closeBase()
		return nil, err
	}
	endpoints := map[string]string{}
	for name, addr := range map[string]string{"kafka": a.cfg.Listen.Kafka, "remoting": a.cfg.Listen.Remoting, "grpc": a.cfg.Listen.GRPC, "http": a.cfg.Listen.HTTP} {
		if addr != "" {
			endpoints[name] = addr
		}
	}
	self := model.NodeID(a.cfg.NodeID)
	a.membership, err = cluster.Start(ctx, a.meta, cluster.Node{ID: self, Incarnation: time.Now().UnixNano(), Endpoints: endpoints,
		Role: cluster.RoleProtocol, Host: host}, cluster.MembershipOptions{Logger: a.log}, a.cfg.Cluster.Name, false)
	if err != nil {
		a.closeBase()
		return nil, err
	}
	a.log.Info("joined the cluster as a protocol-only node", "cluster", a.cfg.Cluster.Name, "node", self, "groups", len(a.member.Groups()))
	return a, nil
}

// runProtocol serves a protocol-only node until ctx ends.
func (a *App) runProtocol(ctx context.Context, ready func()) error {
	g, gctx := errgroup.WithContext(ctx)
	relayer := a.member.Relayer()
	serve := func(name, addr string, leader func() (model.NodeID, model.Term), relays *relay.Set) error {
		l, err := a.listen(name, addr)
		if err != nil {
			return err
		}
		rt := &relay.Route{Name: name, Raw: l, Leader: leader, Relays: relays}
		g.Go(func() error { return relayer.Accept(gctx, rt) })
		return nil
	}
	openGroup := func(gr *member.Group) error {
		for _, ep := range []struct{ name, addr string }{{"remoting", a.cfg.Listen.Remoting}, {"grpc", a.cfg.Listen.GRPC}, {"pulsar", a.cfg.Listen.Pulsar}} {
			if ep.addr == "" {
				continue
			}
			port, ok := placement.GroupPort(ep.addr, gr.ID())
			host, _, err := net.SplitHostPort(ep.addr)
			if !ok || err != nil {
				return fmt.Errorf("%w: listener %s: no port for group %d", model.ErrInvalidConfig, ep.addr, gr.ID())
			}
			name := ep.name
			if gr.ID() > 0 {
				name += "/" + strconv.Itoa(int(gr.ID()))
			}
			if err := serve(name, net.JoinHostPort(host, strconv.Itoa(port)), gr.Leader, gr.Relays()); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	groups := a.member.Groups()
	for _, gr := range groups {
		if err = openGroup(gr); err != nil {
			break
		}
	}
	// MQTT clients go to group 0's leader, which serves them all.
	mqttSSL := a.cfg.Listen.MQTTSSL
	if a.cfg.Listen.MQTTTLS == "disabled" {
		mqttSSL = ""
	}
	for _, ep := range []struct{ name, addr string }{{"mqtt", a.cfg.Listen.MQTT}, {"mqtt-ssl", mqttSSL}} {
		if ep.addr != "" && err == nil {
			err = serve(ep.name, ep.addr, groups[0].Leader, groups[0].Relays())
		}
	}
	if err == nil && a.cfg.Listen.Kafka != "" {
		err = a.serveKafkaProxy(gctx, g)
	}
	if err == nil && a.cfg.Listen.HTTP != "" {
		err = a.serveProtocolHTTP(gctx, g)
	}
	if err != nil {
		a.member.Stop()
		return errors.Join(err, g.Wait(), a.close())
	}
	g.Go(func() error {
		return a.member.RunProtocol(gctx, func(fresh []*member.Group) {
			for _, gr := range fresh {
				if err := openGroup(gr); err != nil {
					a.log.Error("listeners of an added group", "group", gr.ID(), "err", err)
				}
			}
		})
	})
	g.Go(func() error {
		select {
		case <-gctx.Done():
			return nil
		case <-a.membership.Lost():
			return a.membership.Err()
		}
	})
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	a.member.Stop() // relayed connections close
	err = g.Wait()
	return errors.Join(err, a.close())
}

// serveKafkaProxy serves Kafka clients by forwarding their requests to the
// groups' leaders (kafka.Proxy).
func (a *App) serveKafkaProxy(ctx context.Context, g *errgroup.Group) error {
	l, err := a.listen("kafka", a.cfg.Listen.Kafka)
	if err != nil {
		return err
	}
	tl, err := a.tlsListener("kafka", l, a.cfg.Listen.KafkaTLS)
	if err != nil {
		return err
	}
	m := a.member
	proxy := kafka.NewProxy(kafka.ProxyOptions{
		NodeID: int32(a.cfg.NodeID),
		Nodes: func() map[int32]string {
			out := map[int32]string{}
			for host, id := range m.ProtocolNodes() {
				out[int32(id)] = host
			}
			return out
		},
		Groups:     func() int { return len(m.Groups()) },
		MadeGroups: m.MadeGroups,
		Leader: func(g int) int32 {
			groups := m.Groups()
			if g < 0 || g >= len(groups) {
				return 0
			}
			leader, _ := groups[g].Leader()
			return int32(leader)
		},
		Forward: func(ctx context.Context, node int32, f kafka.Forwarded) (kafka.ForwardAnswer, error) {
			body := kafka.AppendForwarded(nil, f)
			// A member connects to a protocol-only node within a second
			// of its registration (and again after a cut): a call not
			// sent for want of the connection waits for it a little.
			deadline := time.Now().Add(forwardConnectWait)
			for {
				out, err := m.Peers().CallRaw(ctx, model.NodeID(node), peer.KafkaForward, body, forwardTimeout)
				if err == nil {
					return kafka.DecodeForwardAnswer(out)
				}
				if !errors.Is(err, replication.ErrNotSent) || time.Now().After(deadline) || ctx.Err() != nil {
					return kafka.ForwardAnswer{}, err
				}
				time.Sleep(50 * time.Millisecond)
			}
		},
		Logger:        a.log,
		MaxFrameBytes: int32(a.cfg.Limits.MaxFrameBytes),
	})
	g.Go(func() error { return proxy.Serve(ctx, tl) })
	return nil
}

// forwardConnectWait bounds how long a forwarded request waits for the
// transport's connection to its member.
const forwardConnectWait = 3 * time.Second

// forwardTimeout bounds one forwarded Kafka request: longer than any
// wait a client asks for (a fetch's, a produce's acknowledgement).
const forwardTimeout = 60 * time.Second

// serveProtocolHTTP serves a protocol-only node's HTTP listener: its own
// /healthz (ready once group 0 has a leader) and /metrics, the rest
// proxied to the admin API of group 0's leader.
func (a *App) serveProtocolHTTP(ctx context.Context, g *errgroup.Group) error {
	l, err := a.listen("http", a.cfg.Listen.HTTP)
	if err != nil {
		return err
	}
	var leaderHTTP atomic.Pointer[string]
	findLeader := func() string {
		leader, _ := a.member.Groups()[0].Leader()
		if leader == 0 {
			return ""
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		nodes, err := cluster.Nodes(lctx, a.meta)
		if err != nil {
			return ""
		}
		for _, n := range nodes {
			if n.ID == leader && n.Endpoints["http"] != "" {
				return n.Endpoints["http"]
			}
		}
		return ""
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", *leaderHTTP.Load()
			r.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			leaderHTTP.Store(new(string)) // look the leader up again
			http.Error(w, "the cluster's admin API is not reachable from this protocol-only node: "+err.Error(), http.StatusBadGateway)
		},
	}
	leaderHTTP.Store(new(string))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if leader, _ := a.member.Groups()[0].Leader(); leader == 0 {
			http.Error(w, "no leader known for group 0", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if *leaderHTTP.Load() == "" {
			h := findLeader()
			if h == "" {
				http.Error(w, "no leader known for group 0", http.StatusServiceUnavailable)
				return
			}
			leaderHTTP.Store(&h)
		}
		proxy.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	g.Go(func() error {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return nil
}
