package app

import (
	"fmt"
	"net"
	"strconv"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/grpcv5"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt"
	"github.com/rosettamq/rosetta/internal/pulsar"
	"github.com/rosettamq/rosetta/internal/remoting"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/serving"
)

// ErrRestartToInstall is what Run returns when this member fetched a
// snapshot of a group: start it again (the same process arguments) and it
// installs the snapshot.
var ErrRestartToInstall = replication.ErrRestartToInstall

// servingDeps maps the configuration onto what serves clients: the option
// templates of every stack and protocol server, and the node's services.
func (a *App) servingDeps() (serving.Deps, error) {
	cfg := a.cfg
	delays, err := broker.ParseDelayLevels(cfg.Broker.DelayLevels)
	if err != nil {
		return serving.Deps{}, err
	}
	d := serving.Deps{
		Log:         a.log,
		Meta:        a.meta,
		Member:      a.member,
		Groups:      cfg.Cluster.groups(),
		ClusterName: cfg.Cluster.Name,
		Broker: broker.Options{
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
			TraceAll:          cfg.Broker.MessageTraceAll,
			TraceSample:       cfg.Broker.MessageTraceSample,
			TraceRetention:    cfg.Broker.MessageTraceRetention,

			OffsetSnapshotInterval: cfg.Broker.StateSnapshotInterval,
		},
		Txn: txn.Options{MaxTimeout: cfg.Broker.TransactionMaxTimeout, SnapshotInterval: cfg.Broker.StateSnapshotInterval},
		Pop: pop.Options{SnapshotInterval: cfg.Broker.StateSnapshotInterval},
		Coordinator: groups.Options{
			MinSessionTimeout: cfg.Broker.GroupMinSessionTimeout, MaxSessionTimeout: cfg.Broker.GroupMaxSessionTimeout,
			ConsumerSessionTimeout: cfg.Broker.GroupConsumerSessionTimeout, ConsumerHeartbeatInterval: cfg.Broker.GroupConsumerHeartbeatInterval,
		},
		Kafka: kafka.Options{
			Tracer:             a.tracer,
			NodeID:             int32(cfg.NodeID),
			AdvertisedAddr:     cfg.Listen.KafkaAdvertised,
			LeaderAck:          cfg.Cluster.LeaderAck,
			MaxFrameBytes:      int32(cfg.Limits.MaxFrameBytes),
			MaxInflightPerConn: cfg.Limits.MaxInflightPerConn,
			MaxBytesInFlight:   int64(cfg.Limits.MaxBytesInFlight),
			Security:           a.security,
			SASLMechanisms:     splitComma(cfg.Security.SASLMechanisms),
			MaxReauth:          cfg.Security.MaxReauth,
			AuthTimeout:        cfg.Security.AuthTimeout,
			Guard:              a.guard,
			Quotas:             a.quotas,
			ObserveRequest:     a.metrics.RequestObserver("kafka"),
		},
		Remoting: remoting.Options{
			Tracer:             a.tracer,
			AdvertisedAddr:     cfg.Listen.RemotingAdvertised,
			MaxFrameBytes:      int32(min(int64(cfg.Limits.MaxFrameBytes), 1<<30)),
			MaxInflightPerConn: cfg.Limits.MaxInflightPerConn,
			ReadLinger:         cfg.Listen.RemotingReadLinger,
			Security:           a.security,
			Authentication:     cfg.Security.RemotingAuthentication,
			Guard:              a.guard,
			Quotas:             a.quotas,
			ObserveRequest:     a.metrics.RequestObserver("remoting"),
		},
		GRPC: grpcv5.Options{
			Tracer:         a.tracer,
			AdvertisedAddr: cfg.Listen.GRPCAdvertised,
			Security:       a.security,
			Authentication: cfg.Security.GRPCAuthentication,
			Guard:          a.guard,
			Quotas:         a.quotas,
			ObserveRequest: a.metrics.RequestObserver("grpc"),
		},
		Pulsar: pulsar.Options{AdvertisedAddr: cfg.Listen.PulsarAdvertised, Security: a.security,
			Authentication: cfg.Security.PulsarAuthentication},
		MQTT: mqtt.Options{Security: a.security, Authentication: cfg.Security.MQTTAuthentication, ObserveRequest: a.metrics.RequestObserver("mqtt"),
			Mapping:       mqtt.Mapping{Levels: cfg.MQTT.TopicLevels, Default: mqttDefaultTopic(cfg.MQTT.DefaultTopic)},
			MaxPacketSize: int(cfg.MQTT.MaxPacketSize), MaxInflight: cfg.MQTT.MaxInflight, MaxSessionExpiry: cfg.MQTT.MaxSessionExpiry},
		Quotas:           a.quotas,
		Security:         a.adminSecurity(),
		Metrics:          a.metrics,
		MaxBytesInFlight: int64(cfg.Limits.MaxBytesInFlight),
		HTTPAddr:         cfg.Listen.HTTP,
		ShutdownTimeout:  cfg.ShutdownTimeout,
		TLS:              a.tlsListener,
		Addr:             a.Addr,
		ClusterID:        a.clusterID,
		Cluster:          admin.ClusterOps{Status: a.clusterStatus},
	}
	if a.member != nil {
		d.Cluster = a.clusterOps()
		d.Groups = a.member.MadeGroups()
		d.OpenGroup = a.groupEndpoints
		d.Leave = a.leaveEarly
		d.BalanceQueues = cfg.Cluster.BalanceQueues
	}
	return d, nil
}

// adminSecurity is what guards the admin API.
func (a *App) adminSecurity() admin.Security {
	return admin.Security{Service: a.security, Quotas: a.quotas}
}

// newGroupState makes a group's state (group 0's is the node's).
func (a *App) newGroupState(model.GroupID) member.State {
	return &serving.GroupState{Producers: a.newProducers(), KafkaTxns: producers.NewTxnIndex()}
}

// newProducers makes an idempotent-producer state.
func (a *App) newProducers() *producers.Manager {
	return producers.New(a.meta, producers.Options{
		Expiration: a.cfg.Broker.ProducerIDExpiration,
		MaxStates:  a.cfg.Broker.MaxProducerStates,
		Logger:     a.log,
	})
}

// groupEndpoints opens the RocketMQ and Pulsar listeners of group g > 0
// (on the remoting, gRPC and Pulsar ports + g, same host) beside the node's own (also for
// a group added while the member runs).
func (a *App) groupEndpoints(g int) ([]serving.Endpoint, error) {
	var out []serving.Endpoint
	{
		for _, ep := range a.baseEndpoints {
			if ep.Kind != "remoting" && ep.Kind != "grpc" && ep.Kind != "pulsar" {
				continue
			}
			host, _, err := net.SplitHostPort(ep.Raw.Addr().String())
			if err != nil {
				return out, err
			}
			port, ok := placement.GroupPort(ep.Raw.Addr().String(), model.GroupID(g))
			if !ok {
				return out, fmt.Errorf("%s listener %s: no port for group %d", ep.Name, ep.Raw.Addr(), g)
			}
			name := ep.Name + "/" + strconv.Itoa(g)
			l, err := a.listen(name, net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return out, err
			}
			gep := ep
			gep.Name, gep.Raw, gep.Group = name, l, g
			out = append(out, gep)
		}
	}
	return out, nil
}

// mqttDefaultTopic is mqtt.default_topic as a topic name (validated with
// the configuration).
func mqttDefaultTopic(name string) model.TopicName {
	n, _ := model.ParseTopicName(name)
	return n
}
