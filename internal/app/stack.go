package app

import (
	"context"
	"errors"
	"fmt"
	"net"

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
	"github.com/rosettamq/rosetta/internal/remoting"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/task"
)

// stack is the broker core and what is built over it: the state machines
// applied from the log and the coordinators that serve clients. A single
// node builds it once; a cluster member builds one each time it becomes
// its group's leader (from the log alone, like a restart) and drops it
// when leadership ends.
type stack struct {
	parts  stackParts
	broker *broker.Broker
	txns   *txn.Coordinator
	pop    *pop.Engine
	groups *groups.Coordinator
	// members gathers live group members for the admin API (the Kafka
	// coordinator's, and the front-ends' as they start).
	members *admin.Members
	// history samples rates and lag for the admin API and console.
	history *admin.History
}

// stackParts is what a stack is built over: a replication group's engine
// (the node's on a single node), the producer state checkpointed with it,
// the group's share of the queues and its RocketMQ broker name.
type stackParts struct {
	group      model.GroupID
	engine     *storage.Engine
	producers  *producers.Manager
	kafkaTxns  *producers.TxnIndex
	placement  route.Placement
	brokerName string // "": the front-ends' default
}

// singleParts are a single node's: its engine holds every queue.
func (a *App) singleParts() stackParts {
	return stackParts{engine: a.engine, producers: a.producers, kafkaTxns: a.kafkaTxns}
}

// newStack builds the broker core over an open engine and the metadata.
func (a *App) newStack(ctx context.Context, parts stackParts) (*stack, error) {
	cfg, log := a.cfg, a.log
	delays, err := broker.ParseDelayLevels(cfg.Broker.DelayLevels)
	if err != nil {
		return nil, err
	}
	if parts.group != 0 {
		log = log.With("group", parts.group)
	}
	st := &stack{parts: parts}
	st.broker, err = broker.New(ctx, parts.engine, a.meta, broker.Options{
		Placement:         parts.placement,
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
		KafkaTxns:         parts.kafkaTxns,
		TraceAll:          cfg.Broker.MessageTraceAll,
		TraceSample:       cfg.Broker.MessageTraceSample,
		TraceRetention:    cfg.Broker.MessageTraceRetention,
		Logger:            log,

		OffsetSnapshotInterval: cfg.Broker.StateSnapshotInterval,
	})
	if err != nil {
		return nil, err
	}
	txnOpts := txn.Options{MaxTimeout: cfg.Broker.TransactionMaxTimeout, SnapshotInterval: cfg.Broker.StateSnapshotInterval, Logger: log}
	if len(a.serving) > 1 {
		txnOpts.Peers = txnPeers{a: a, self: int(parts.group), groups: len(a.serving)}
	}
	st.txns, err = txn.New(ctx, st.broker, parts.producers, parts.kafkaTxns, txnOpts)
	if err != nil {
		st.close()
		return nil, fmt.Errorf("transaction coordinator: %w", err)
	}
	if st.pop, err = pop.New(ctx, st.broker, pop.Options{SnapshotInterval: cfg.Broker.StateSnapshotInterval, Logger: log}); err != nil {
		st.close()
		return nil, fmt.Errorf("pop engine: %w", err)
	}
	st.groups = groups.New(groups.Options{Logger: log,
		MinSessionTimeout: cfg.Broker.GroupMinSessionTimeout, MaxSessionTimeout: cfg.Broker.GroupMaxSessionTimeout,
		ConsumerSessionTimeout: cfg.Broker.GroupConsumerSessionTimeout, ConsumerHeartbeatInterval: cfg.Broker.GroupConsumerHeartbeatInterval,
		Persist: st.broker.PersistGroup})
	if n, bad := st.groups.Restore(st.broker.GroupImages()); n+bad > 0 {
		log.Info("consumer groups restored", "groups", n, "skipped", bad)
	}
	st.members = &admin.Members{Kafka: st.groups, Pop: st.pop, ConsumerProtocol: kafka.DecodeConsumerProtocol}
	st.history = admin.NewHistory(st.broker, 0)
	return st, nil
}

// kafkaOptions are the Kafka front-end's settings.
func (a *App) kafkaOptions(budget *task.ByteBudget) kafka.Options {
	return kafka.Options{
		Tracer:             a.tracer,
		Budget:             budget,
		NodeID:             int32(a.cfg.NodeID),
		AdvertisedAddr:     a.cfg.Listen.KafkaAdvertised,
		ClusterID:          a.clusterID(),
		Cluster:            a.kafkaCluster(),
		Elect:              a.electLeader(),
		LeaderAck:          a.cfg.Cluster.LeaderAck,
		MaxFrameBytes:      int32(a.cfg.Limits.MaxFrameBytes),
		MaxInflightPerConn: a.cfg.Limits.MaxInflightPerConn,
		MaxBytesInFlight:   int64(a.cfg.Limits.MaxBytesInFlight),
		Security:           a.security,
		SASLMechanisms:     splitComma(a.cfg.Security.SASLMechanisms),
		MaxReauth:          a.cfg.Security.MaxReauth,
		AuthTimeout:        a.cfg.Security.AuthTimeout,
		Guard:              a.guard,
		Quotas:             a.quotas,
		ObserveRequest:     a.metrics.RequestObserver("kafka"),
		Logger:             a.log,
	}
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

// close stops the stack (what of it was built), newest first.
func (st *stack) close() error {
	var errs []error
	if st.groups != nil {
		st.groups.Close()
	}
	if st.pop != nil {
		st.pop.Close()
	}
	if st.txns != nil {
		errs = append(errs, st.txns.Close())
	}
	if st.broker != nil {
		errs = append(errs, st.broker.Close())
	}
	return errors.Join(errs...)
}

// frontEnds are the listeners the protocol servers of a stack serve
// (TLS already applied), by endpoint.
type frontEnds struct {
	kafka    []net.Listener
	kafkaLis []kafka.Listener
	remoting net.Listener
	grpc     net.Listener
}

// serve runs the protocol servers over st on fe until ctx ends.
func (a *App) serve(ctx context.Context, g *errgroup.Group, st *stack, fe frontEnds, budget *task.ByteBudget) {
	if st.parts.group == 0 {
		// Storage use is accounted from group 0's broker.
		g.Go(func() error { a.quotas.Run(ctx, st.broker); return nil })
	}
	g.Go(func() error { st.history.Run(ctx); return nil })
	if len(fe.kafka) > 0 {
		srv := kafka.NewSingle(kafka.Backend{Broker: st.broker, Groups: st.groups, Producers: st.parts.producers, Transactions: st.txns},
			a.kafkaOptions(budget))
		for i, l := range fe.kafka {
			lis := fe.kafkaLis[i]
			g.Go(func() error { return srv.ServeListener(ctx, l, lis) })
		}
	}
	if fe.remoting != nil {
		srv := remoting.NewServer(st.broker, remoting.Options{
			Tracer:             a.tracer,
			Budget:             budget,
			AdvertisedAddr:     a.cfg.Listen.RemotingAdvertised,
			Advertise:          a.relayedAdvertise(),
			BrokerName:         st.parts.brokerName,
			Cluster:            a.brokerRoutes("remoting"),
			MaxFrameBytes:      int32(min(int64(a.cfg.Limits.MaxFrameBytes), 1<<30)),
			MaxInflightPerConn: a.cfg.Limits.MaxInflightPerConn,
			ReadLinger:         a.cfg.Listen.RemotingReadLinger,
			Pop:                st.pop,
			Security:           a.security,
			Authentication:     a.cfg.Security.RemotingAuthentication,
			Guard:              a.guard,
			Quotas:             a.quotas,
			ObserveRequest:     a.metrics.RequestObserver("remoting"),
			Logger:             a.log,
		})
		st.members.Add(admin.MemberSource{Members: remotingMembers(srv), Groups: srv.ConsumerGroups})
		g.Go(func() error { return srv.Serve(ctx, fe.remoting) })
	}
	if fe.grpc != nil {
		srv := grpcv5.NewServer(st.broker, grpcv5.Options{
			Tracer:         a.tracer,
			AdvertisedAddr: a.cfg.Listen.GRPCAdvertised,
			BrokerName:     st.parts.brokerName,
			Cluster:        a.grpcRoutes(),
			Pop:            st.pop,
			Security:       a.security,
			Authentication: a.cfg.Security.GRPCAuthentication,
			Guard:          a.guard,
			Quotas:         a.quotas,
			ObserveRequest: a.metrics.RequestObserver("grpc"),
			Logger:         a.log,
		})
		st.members.Add(admin.MemberSource{Members: grpcMembers(srv), Groups: srv.ConsumerGroups})
		g.Go(func() error { return srv.Serve(ctx, fe.grpc) })
	}
}
