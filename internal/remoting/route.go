package remoting

// Name-server requests: GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO
// (106), GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206). On a single node (and a
// cluster of one replication group) this broker is the only one: every
// route points back at the address the client used (or the advertised
// one). A cluster of several groups (Options.Cluster) answers one broker
// per group, each holding its share of every topic's queues (queue i of
// the topic in group i mod groups, route.Placement), at its leader (broker
// id 0) and its other members (1..). TBW102, the topic producers fall back to for a topic
// that does not exist yet, has a route while auto-creation is on; the send
// then creates the topic. RMQ_SYS_TRACE_TOPIC, where clients with message
// trace on send their trace records, exists from its first route query
// (one queue, as RocketMQ creates it), so traces are stored and found by
// QUERY_MESSAGE on the traced message ids (their KEYS), as RocketMQ
// Dashboard looks them up.

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// autoCreateTopicKey is the topic producers use to find brokers that may
// create a topic on first send.
const autoCreateTopicKey = "TBW102"

// traceTopic is the default topic of RocketMQ clients' message trace
// records.
const traceTopic = "RMQ_SYS_TRACE_TOPIC"

// permReadWrite is PermName READ|WRITE.
const permReadWrite = 6

type queueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
	TopicSysFlag   int    `json:"topicSysFlag"`
}

type brokerData struct {
	Cluster     string            `json:"cluster"`
	BrokerName  string            `json:"brokerName"`
	BrokerAddrs map[string]string `json:"brokerAddrs"`
}

type topicRouteData struct {
	OrderTopicConf    string              `json:"orderTopicConf"`
	QueueDatas        []queueData         `json:"queueDatas"`
	BrokerDatas       []brokerData        `json:"brokerDatas"`
	FilterServerTable map[string][]string `json:"filterServerTable"`
}

// BrokerRoute is one broker of a cluster as routes name it: its name and
// its addresses by broker id (0: the leader, absent while none is known).
type BrokerRoute struct {
	Name  string
	Addrs map[int64]string
}

// brokerDatas are the brokers routes name: this one alone, or the
// cluster's.
func (s *Server) brokerDatas(rc *reqCtx) []brokerData {
	if s.opts.Cluster == nil {
		return []brokerData{{Cluster: s.opts.ClusterName, BrokerName: s.opts.BrokerName,
			BrokerAddrs: map[string]string{"0": rc.conn.store}}}
	}
	var out []brokerData
	for _, b := range s.opts.Cluster(rc.conn.nc.RemoteAddr()) {
		addrs := make(map[string]string, len(b.Addrs))
		for id, a := range b.Addrs {
			addrs[strconv.FormatInt(id, 10)] = a
		}
		out = append(out, brokerData{Cluster: s.opts.ClusterName, BrokerName: b.Name, BrokerAddrs: addrs})
	}
	return out
}

// queueDatas are a topic's queues per broker: count(g) in group g's
// broker.
func (s *Server) queueDatas(brokers []brokerData, count func(g model.GroupID) int) []queueData {
	out := make([]queueData, 0, len(brokers))
	for g, b := range brokers {
		if n := count(model.GroupID(g)); n > 0 {
			out = append(out, queueData{BrokerName: b.BrokerName, ReadQueueNums: n, WriteQueueNums: n, Perm: permReadWrite})
		}
	}
	return out
}

func handleGetRouteInfo(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	topic := req.Ext("topic")
	var count func(g model.GroupID) int
	if topic == autoCreateTopicKey && s.broker.AutoCreateTopics() {
		// In every broker of the cluster's factor, as for TBW102: a topic
		// a producer makes on its first send gets the default factor.
		n, def := s.broker.DefaultQueues(), s.broker.Placement().NewQueues(0)
		count = func(g model.GroupID) int {
			if s.opts.Cluster == nil || slices.Contains(def, g) {
				return n
			}
			return 0
		}
	} else {
		if strings.HasPrefix(topic, "%RETRY%") || topic == s.replyTopic() || topic == traceTopic {
			// A group's retry topic (and the reply and trace topics) exists
			// as soon as anyone asks for it (a consumer's first route query
			// may come before its heartbeat; auto-creation may be off).
			if _, err := s.ensureTopic(rc, topic, 1); err != nil {
				return errorResponse(req, err)
			}
		}
		t, err := s.lookupTopic(topic)
		if err != nil {
			return errorResponse(req, err)
		}
		count = t.CountIn
	}
	brokers := s.brokerDatas(rc)
	route := topicRouteData{
		QueueDatas:        s.queueDatas(brokers, count),
		BrokerDatas:       brokers,
		FilterServerTable: map[string][]string{},
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(route)
	return resp
}

func handleGetBrokerClusterInfo(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	table := map[string]brokerData{}
	var names []string
	for _, bd := range s.brokerDatas(rc) {
		table[bd.BrokerName] = bd
		names = append(names, bd.BrokerName)
	}
	body := map[string]any{
		"brokerAddrTable":  table,
		"clusterAddrTable": map[string][]string{s.opts.ClusterName: names},
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(body)
	return resp
}

func handleGetAllTopicList(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	var names []string
	for _, t := range s.broker.Topics(false) {
		names = append(names, rmqName(t.Name))
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(map[string]any{"topicList": names, "brokerAddr": rc.conn.store})
	return resp
}

// topicName maps a RocketMQ topic name to Rosetta's: a client namespace
// ("ns%orders", the clients' namespace option) is a namespace of the default
// tenant (public/ns/orders, which Kafka clients call ns/orders); system
// topics (%RETRY%…, %DLQ%…) and plain names live in public/default.
func topicName(name string) (model.TopicName, error) {
	if i := strings.IndexByte(name, '%'); i > 0 {
		n := model.TopicName{Tenant: model.DefaultTenant, Namespace: name[:i], Topic: name[i+1:]}
		if _, err := model.ParseTopicName(n.String()); err != nil {
			return n, err
		}
		return n, nil
	}
	return model.ParseTopicName(name)
}

// lookupTopic resolves a RocketMQ topic name to an existing topic.
func (s *Server) lookupTopic(name string) (*topicRef, error) {
	n, err := topicName(name)
	if err != nil {
		return nil, err
	}
	t, err := s.broker.Topic(n)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// rmqName is the name RocketMQ clients see (namespaces as "ns%topic").
func rmqName(n model.TopicName) string {
	if n.Tenant == model.DefaultTenant && n.Namespace != model.DefaultNamespace {
		return n.Namespace + "%" + n.Topic
	}
	return n.Short()
}

// errorResponse maps a core error to a response code.
func errorResponse(req *protocol.Command, err error) *protocol.Command {
	return protocol.NewResponse(req, responseCode(err), err.Error())
}

// responseCode is the one place core errors become remoting codes.
func responseCode(err error) int32 {
	switch {
	case err == nil:
		return protocol.Success
	case errors.Is(err, model.ErrUnknownTopic), errors.Is(err, model.ErrInvalidTopic):
		return protocol.TopicNotExist
	case errors.Is(err, model.ErrMessageTooLarge):
		return protocol.MessageIllegal
	case errors.Is(err, model.ErrDiskFull), errors.Is(err, model.ErrClosed), errors.Is(err, model.ErrNotLeader),
		errors.Is(err, model.ErrTierUnavailable):
		// SERVICE_NOT_AVAILABLE rather than NOT_LEADER_FOR_QUEUE (501): it
		// is a code the clients retry on another broker.
		return protocol.ServiceNotAvailable
	case errors.Is(err, errInvalidParameter):
		return protocol.InvalidParameter
	case errors.Is(err, quota.ErrExceeded):
		return protocol.NoPermission
	}
	return protocol.SystemError
}

var errInvalidParameter = errors.New("invalid parameter")
