package serving

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/grpcv5"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt"
	"github.com/rosettamq/rosetta/internal/pulsar"
	"github.com/rosettamq/rosetta/internal/remoting"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
)

// Stack is the broker core and what is built over it: the state machines
// applied from the log and the coordinators that serve clients. A single
// node builds it once; a cluster member builds one each time it becomes
// its group's leader (from the log alone, like a restart) and drops it
// when leadership ends.
type Stack struct {
	Parts  Parts
	Broker *broker.Broker
	Txns   *txn.Coordinator
	Pop    *pop.Engine
	Groups *groups.Coordinator
	// Members gathers live group members for the admin API (the Kafka
	// coordinator's, and the front-ends' as they start).
	Members *admin.Members
	// History samples rates and lag for the admin API and console.
	History *admin.History
}

// Parts is what a stack is built over: a replication group's engine (the
// node's on a single node), the producer state checkpointed with it, the
// group's share of the queues and its RocketMQ broker name.
type Parts struct {
	Group      model.GroupID
	Engine     *storage.Engine
	Producers  *producers.Manager
	KafkaTxns  *producers.TxnIndex
	Placement  route.Placement
	BrokerName string // "": the front-ends' default
}

// NewStack builds the broker core over an open engine and the metadata.
func (n *Node) NewStack(ctx context.Context, parts Parts) (*Stack, error) {
	log := n.log
	if parts.Group != 0 {
		log = log.With("group", parts.Group)
	}
	st := &Stack{Parts: parts}
	bopts := n.Deps.Broker
	bopts.Placement, bopts.KafkaTxns, bopts.Logger = parts.Placement, parts.KafkaTxns, log
	if n.Member != nil {
		bopts.MakeGroups = n.Member.MakeGroups
		bopts.Elsewhere = elsewhere{n}
	}
	var err error
	if st.Broker, err = broker.New(ctx, parts.Engine, n.Meta, bopts); err != nil {
		return nil, err
	}
	txnOpts := n.Txn
	txnOpts.Logger = log
	if n.Member != nil {
		txnOpts.Peers = txnPeers{n: n, self: int(parts.Group), groups: max(n.Groups, 1), cat: st.Broker}
	}
	if st.Txns, err = txn.New(ctx, st.Broker, parts.Producers, parts.KafkaTxns, txnOpts); err != nil {
		st.Close()
		return nil, fmt.Errorf("transaction coordinator: %w", err)
	}
	popOpts := n.Deps.Pop
	popOpts.Logger = log
	if st.Pop, err = pop.New(ctx, st.Broker, popOpts); err != nil {
		st.Close()
		return nil, fmt.Errorf("pop engine: %w", err)
	}
	gopts := n.Coordinator
	gopts.Logger, gopts.Persist = log, st.Broker.PersistGroup
	gopts.ConsumerTimeouts = kafka.GroupConsumerTimeouts(st.Broker)
	gopts.ShareTimeouts = kafka.GroupShareTimeouts(st.Broker)
	st.Groups = groups.New(gopts)
	if restored, bad := st.Groups.Restore(st.Broker.GroupImages()); restored+bad > 0 {
		log.Info("consumer groups restored", "groups", restored, "skipped", bad)
	}
	st.Members = &admin.Members{Kafka: st.Groups, Pop: st.Pop, ConsumerProtocol: kafka.DecodeConsumerProtocol}
	st.History = admin.NewHistory(st.Broker, 0)
	return st, nil
}

// kafkaOptions are the Kafka front-end's settings.
func (n *Node) kafkaOptions(budget *task.ByteBudget) kafka.Options {
	opts := n.Kafka
	opts.Budget = budget
	opts.ClusterID = n.ClusterID()
	opts.Cluster = n.kafkaCluster()
	opts.Elect = n.electLeader()
	opts.InSync = n.inSyncCount()
	opts.Logger = n.log
	return opts
}

// remotingMembers describes a remoting server's live consumers of a group
// as the admin API shows members.
func remotingMembers(srv *remoting.Server) func(group string) []apiv1.GroupMember {
	return func(group string) []apiv1.GroupMember {
		var out []apiv1.GroupMember
		for _, c := range srv.Consumers(group) {
			out = append(out, apiv1.GroupMember{Protocol: "rocketmq", ClientID: c.ClientID, Host: c.Address,
				Client: fmt.Sprintf("%s %d, %s %s", c.Language, c.Version, c.ConsumeType, c.MessageModel), Subscriptions: c.Subscriptions})
		}
		return out
	}
}

// grpcMembers describes a gRPC server's live consumers of a group as the
// admin API shows members.
func grpcMembers(srv *grpcv5.Server) func(group string) []apiv1.GroupMember {
	return func(group string) []apiv1.GroupMember {
		var out []apiv1.GroupMember
		for _, c := range srv.Consumers(group) {
			out = append(out, apiv1.GroupMember{Protocol: "rocketmq-grpc", ClientID: c.ClientID, Host: c.Address,
				Client: fmt.Sprintf("%s %s, %s", c.Language, c.Version, c.ClientType), Subscriptions: c.Subscriptions})
		}
		return out
	}
}

// Close stops the stack (what of it was built), newest first.
func (st *Stack) Close() error {
	var errs []error
	if st.Groups != nil {
		st.Groups.Close()
	}
	if st.Pop != nil {
		st.Pop.Close()
	}
	if st.Txns != nil {
		errs = append(errs, st.Txns.Close())
	}
	if st.Broker != nil {
		errs = append(errs, st.Broker.Close())
	}
	return errors.Join(errs...)
}

// FrontEnds are the listeners the protocol servers of a stack serve
// (TLS already applied), by endpoint.
type FrontEnds struct {
	Kafka     []net.Listener
	KafkaLis  []kafka.Listener
	Remoting  net.Listener
	GRPC      net.Listener
	Pulsar    net.Listener
	PulsarSSL net.Listener
	// PulsarServer serves Pulsar (built early when its admin API shares
	// the HTTP port).
	PulsarServer *pulsar.Server
	MQTT         net.Listener
	MQTTSSL      net.Listener
	// MQTTServer serves MQTT (built early: its WebSocket endpoint is on
	// the HTTP port).
	MQTTServer *mqtt.Server
}

// RunSingle serves a single node's stack over its opened endpoints until
// ctx ends, with what runs for the node's whole life (also) beside it,
// then stops its servers (the caller closes what it opened).
func (n *Node) RunSingle(ctx context.Context, ready func(), eps []Endpoint, also func(context.Context, *errgroup.Group)) error {
	var fe FrontEnds
	var httpL net.Listener
	for _, ep := range eps {
		l, err := n.TLS(ep.Name, ep.Raw, ep.TLS, ep.ALPN...)
		if err != nil {
			for _, o := range eps {
				o.Raw.Close()
			}
			return err
		}
		switch {
		case ep.Name == "http":
			httpL = l
		case ep.Name == "remoting":
			fe.Remoting = l
		case ep.Name == "grpc":
			fe.GRPC = l
		case ep.Name == "pulsar":
			fe.Pulsar = l
		case ep.Name == "pulsar-ssl":
			fe.PulsarSSL = l
		case ep.Name == "mqtt":
			fe.MQTT = l
		case ep.Name == "mqtt-ssl":
			fe.MQTTSSL = l
		case ep.Kafka != nil:
			fe.Kafka = append(fe.Kafka, l)
			fe.KafkaLis = append(fe.KafkaLis, *ep.Kafka)
		}
	}
	st := n.Stack(0)
	g, gctx := errgroup.WithContext(ctx)
	if fe.Pulsar != nil || fe.PulsarSSL != nil {
		fe.PulsarServer = n.pulsarServer(st)
	}
	n.openMQTT(ctx, st, &fe)
	var httpSrv *http.Server
	if httpL != nil {
		admin.RegisterPopMetrics(n.Metrics.Registry, st.Pop)
		var h http.Handler = admin.Handler(st.Broker, st.Txns, n.Metrics, n.log, n.Security, n.Cluster, st.Members, st.History)
		if fe.PulsarServer != nil {
			h = withPulsarAdmin(h, fe.PulsarServer.AdminHandler(n.Security.Guard))
		}
		if fe.MQTTServer != nil {
			h = withMQTT(h, fe.MQTTServer.WebSocketHandler(), fe.MQTTServer.AdminHandler(n.Security.Guard))
		}
		httpSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error { return serveHTTP(httpSrv, httpL) })
	}
	also(gctx, g)
	n.serve(gctx, g, st, fe, task.NewByteBudget(n.MaxBytesInFlight))
	if ready != nil {
		ready()
	}
	<-gctx.Done()
	start := time.Now()
	n.log.Info("shutting down")
	return n.shutdown(g, httpSrv, start)
}

// serveHTTP serves the admin API until its server shuts down.
func serveHTTP(srv *http.Server, l net.Listener) error {
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// shutdown stops the admin server (within the shutdown timeout) and waits
// for the others, which stop with their context.
func (n *Node) shutdown(g *errgroup.Group, httpSrv *http.Server, start time.Time) error {
	sctx, cancel := context.WithTimeout(context.Background(), n.ShutdownTimeout)
	defer cancel()
	if httpSrv != nil {
		_ = httpSrv.Shutdown(sctx)
	}
	err := g.Wait()
	n.log.Debug("servers stopped", "took", time.Since(start))
	return err
}

// serve runs the protocol servers over st on fe until ctx ends.
func (n *Node) serve(ctx context.Context, g *errgroup.Group, st *Stack, fe FrontEnds, budget *task.ByteBudget) {
	if st.Parts.Group == 0 {
		// Storage use is accounted from group 0's broker.
		g.Go(func() error { n.Quotas.Run(ctx, st.Broker); return nil })
	}
	g.Go(func() error { st.History.Run(ctx); return nil })
	if len(fe.Kafka) > 0 {
		srv := kafka.NewSingle(kafka.Backend{Broker: st.Broker, Groups: st.Groups, Producers: st.Parts.Producers, Transactions: st.Txns, Pop: st.Pop},
			n.kafkaOptions(budget))
		for i, l := range fe.Kafka {
			lis := fe.KafkaLis[i]
			g.Go(func() error { return srv.ServeListener(ctx, l, lis) })
		}
	}
	if fe.Remoting != nil {
		opts := n.Remoting
		opts.Budget, opts.Advertise, opts.BrokerName, opts.Cluster = budget, n.relayedAdvertise(), st.Parts.BrokerName, n.brokerRoutes("remoting")
		opts.Pop, opts.Logger = st.Pop, n.log
		srv := remoting.NewServer(st.Broker, opts)
		st.Members.Add(admin.MemberSource{Members: remotingMembers(srv), Groups: srv.ConsumerGroups})
		g.Go(func() error { return srv.Serve(ctx, fe.Remoting) })
	}
	if fe.GRPC != nil {
		opts := n.GRPC
		opts.BrokerName, opts.Cluster, opts.Pop, opts.Logger = st.Parts.BrokerName, n.grpcRoutes(), st.Pop, n.log
		srv := grpcv5.NewServer(st.Broker, opts)
		st.Members.Add(admin.MemberSource{Members: grpcMembers(srv), Groups: srv.ConsumerGroups})
		g.Go(func() error { return srv.Serve(ctx, fe.GRPC) })
	}
	n.serveMQTT(ctx, g, st, fe)
	if fe.Pulsar != nil || fe.PulsarSSL != nil {
		srv := fe.PulsarServer
		if srv == nil {
			srv = n.pulsarServer(st)
		}
		if fe.Pulsar != nil {
			g.Go(func() error { return srv.Serve(ctx, fe.Pulsar) })
		}
		if fe.PulsarSSL != nil {
			g.Go(func() error { return srv.ServeTLS(ctx, fe.PulsarSSL) })
		}
	}
}

// openMQTT builds the MQTT front-end over st when a listener serves it,
// its sessions and retained messages loaded; on failure the listeners
// close (logged).
func (n *Node) openMQTT(ctx context.Context, st *Stack, fe *FrontEnds) {
	if fe.MQTT == nil && fe.MQTTSSL == nil || fe.MQTTServer != nil {
		return
	}
	opts := n.MQTT
	opts.Logger, opts.Pop = n.log, st.Pop
	srv := mqtt.NewServer(st.Broker, opts)
	if err := srv.Open(ctx); err != nil {
		n.log.Error("mqtt: loading sessions and retained messages; the MQTT listener is not served", "err", err)
		for _, l := range []net.Listener{fe.MQTT, fe.MQTTSSL} {
			if l != nil {
				_ = l.Close()
			}
		}
		fe.MQTT, fe.MQTTSSL = nil, nil
		return
	}
	fe.MQTTServer = srv
}

// serveMQTT runs the MQTT front-end over st on its listeners.
func (n *Node) serveMQTT(ctx context.Context, g *errgroup.Group, st *Stack, fe FrontEnds) {
	n.openMQTT(ctx, st, &fe)
	srv := fe.MQTTServer
	if srv == nil {
		return
	}
	g.Go(func() error { srv.RunState(ctx); return nil })
	for _, l := range []net.Listener{fe.MQTT, fe.MQTTSSL} {
		if l != nil {
			g.Go(func() error { return srv.Serve(ctx, l) })
		}
	}
}

// withMQTT serves MQTT over WebSocket at /mqtt and MQTT's part of the
// admin API beside the node's admin API.
func withMQTT(h, ws, mqttAdmin http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mqtt", ws)
	mux.Handle("/api/v1/mqtt/", mqttAdmin)
	mux.Handle("/", h)
	return mux
}

// pulsarServer builds the Pulsar front-end over st.
func (n *Node) pulsarServer(st *Stack) *pulsar.Server {
	opts := n.Pulsar
	opts.Pop, opts.Logger, opts.GroupAddr = st.Pop, n.log, n.pulsarGroupAddr()
	if n.Member != nil {
		asker := admin.GroupAsker{Groups: n.groupCount, Ask: n.askAdmin}
		opts.GroupAdmin = func(g model.GroupID) http.Handler { return admin.Forward(asker, int(g)) }
	}
	return pulsar.NewServer(st.Broker, opts)
}

// withPulsarAdmin serves Pulsar's admin API and HTTP lookups beside the
// node's own admin API.
func withPulsarAdmin(h, pulsarAdmin http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/admin/v2/", pulsarAdmin)
	mux.Handle("/lookup/v2/", pulsarAdmin)
	mux.Handle("/", h)
	return mux
}

// StateDump renders the state the stack's log determines (broker state,
// idempotent-producer and transaction states, POP) in a stable text form.
func (st *Stack) StateDump() (string, error) {
	producers, err := st.Parts.Producers.Capture()
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	sb.WriteString(st.Broker.StateDump())
	fmt.Fprintf(&sb, "producers %x\n", producers)
	sb.WriteString(st.Parts.KafkaTxns.Dump())
	sb.WriteString(st.Pop.Dump())
	if st.Txns != nil {
		for _, t := range st.Txns.List(nil, nil) {
			fmt.Fprintf(&sb, "transaction %+v\n", t)
		}
	}
	return sb.String(), nil
}
