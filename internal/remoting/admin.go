package remoting

// Admin requests of mqadmin- and dashboard-style tools:
// UPDATE_AND_CREATE_TOPIC (17: creates, or grows to writeQueueNums; queue
// counts never shrink), DELETE_TOPIC_IN_BROKER (215), DELETE_TOPIC_IN_NAMESRV
// (216, the same topic: one node plays both roles; deleting a missing topic
// succeeds), GET_ALL_TOPIC_CONFIG (21), GET_EARLIEST_MSG_STORETIME (32) and
// GET_CONSUMER_CONNECTION_LIST (203).

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

func handleUpdateAndCreateTopic(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	name, err := topicName(req.Ext("topic"))
	if err != nil {
		return errorResponse(req, err)
	}
	n := int(max(atoi32(req.Ext("writeQueueNums")), atoi32(req.Ext("readQueueNums"))))
	if n <= 0 {
		n = s.broker.DefaultQueues()
	}
	t, err := s.broker.Topic(name)
	var cfg broker.TopicConfig
	if err == nil {
		cfg = t.Config
	}
	changed, aerr := applyTopicAttributes(&cfg, req.Ext("attributes"))
	if aerr == nil && err == nil && cfg.ReplicationFactor != t.Config.ReplicationFactor {
		aerr = fmt.Errorf("replication.factor of %s is %d: a topic's factor is chosen when it is made", name, t.Config.ReplicationFactor)
	}
	if aerr != nil {
		return protocol.NewResponse(req, protocol.InvalidParameter, aerr.Error())
	}
	switch {
	case errors.Is(err, model.ErrUnknownTopic):
		_, err = s.broker.CreateTopic(rc.ctx, name, n, cfg)
	case err == nil:
		if n > t.QueueCount() {
			_, err = s.broker.GrowTopic(rc.ctx, name, n)
		}
		if err == nil && changed {
			_, err = s.broker.UpdateTopicConfig(rc.ctx, name, cfg)
		}
	}
	if err != nil {
		return errorResponse(req, err)
	}
	return protocol.NewResponse(req, protocol.Success, "")
}

// applyTopicAttributes applies RocketMQ 5 topic attributes ("+key=value"
// sets, "-key" removes, comma-separated): message.type, cleanup.policy
// (DELETE or COMPACTION) and, Rosetta's own, retention.ms,
// retention.bytes (per queue; -1 keeps everything),
// remote.storage.enable (false: never tiered to the bucket) and
// replication.factor (1, 3 or 5 copies in a cluster).
func applyTopicAttributes(cfg *broker.TopicConfig, attrs string) (bool, error) {
	changed := false
	for _, a := range strings.Split(attrs, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		op, kv := a[0], a[1:]
		key, value, _ := strings.Cut(kv, "=")
		if op != '+' && op != '-' {
			return false, fmt.Errorf("topic attribute %q: want +key=value or -key", a)
		}
		if op == '-' {
			value = ""
		}
		switch key {
		case "message.type":
			cfg.MessageType = strings.ToLower(value)
		case "cleanup.policy":
			switch strings.ToUpper(value) {
			case "", "DELETE":
				cfg.CleanupPolicy = ""
			case "COMPACTION":
				cfg.CleanupPolicy = "compact"
			default:
				return false, fmt.Errorf("cleanup.policy %q: want DELETE or COMPACTION", value)
			}
		case "retention.ms", "retention.bytes":
			var n int64
			if value != "" {
				var err error
				if n, err = strconv.ParseInt(value, 10, 64); err != nil || n < -1 || n == 0 {
					return false, fmt.Errorf("%s %q: want a positive number or -1", key, value)
				}
			}
			if key == "retention.ms" {
				cfg.RetentionMs = n
			} else {
				cfg.RetentionBytes = n
			}
		case "remote.storage.enable":
			// Rosetta's own: false keeps the topic out of the bucket.
			switch v := strings.ToLower(strings.TrimSpace(value)); v {
			case "", "true", "false":
				cfg.RemoteStorage = v
			default:
				return false, fmt.Errorf("remote.storage.enable %q: want true or false", value)
			}
		case "replication.factor":
			// Rosetta's own: copies of each queue in a cluster (1, 3 or 5;
			// chosen when the topic is made).
			n := 0
			if value != "" {
				var err error
				if n, err = strconv.Atoi(value); err != nil || n != 1 && n != 3 && n != 5 {
					return false, fmt.Errorf("replication.factor %q: want 1, 3 or 5", value)
				}
			}
			cfg.ReplicationFactor = n
		case "queue.type":
			// BatchCQ / SimpleCQ: one index serves both here.
			continue
		default:
			return false, fmt.Errorf("unknown topic attribute %q", key)
		}
		changed = true
	}
	if changed {
		if err := cfg.Validate(); err != nil {
			return false, err
		}
	}
	return changed, nil
}

func handleDeleteTopic(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	name, err := topicName(req.Ext("topic"))
	if err == nil {
		err = s.broker.DeleteTopic(rc.ctx, name)
	}
	if err != nil && !errors.Is(err, model.ErrUnknownTopic) {
		return errorResponse(req, err)
	}
	return protocol.NewResponse(req, protocol.Success, "")
}

type topicConfig struct {
	TopicName       string `json:"topicName"`
	ReadQueueNums   int    `json:"readQueueNums"`
	WriteQueueNums  int    `json:"writeQueueNums"`
	Perm            int    `json:"perm"`
	TopicFilterType string `json:"topicFilterType"`
	TopicSysFlag    int    `json:"topicSysFlag"`
	Order           bool   `json:"order"`
}

func handleGetAllTopicConfig(rc *reqCtx, req *protocol.Command) *protocol.Command {
	table := map[string]topicConfig{}
	for _, t := range rc.conn.s.broker.Topics(false) {
		name := rmqName(t.Name)
		table[name] = topicConfig{TopicName: name, ReadQueueNums: t.QueueCount(), WriteQueueNums: t.QueueCount(),
			Perm: permReadWrite, TopicFilterType: "SINGLE_TAG"}
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(map[string]any{"topicConfigTable": table,
		"dataVersion": map[string]int64{"timestamp": time.Now().UnixMilli(), "counter": int64(rc.conn.s.broker.TopicsVersion())}})
	return resp
}

func handleGetEarliestMsgStoreTime(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, q, bad := s.queueOf(req)
	if bad != nil {
		return bad
	}
	start, hw, _, err := s.broker.Offsets(t.Name, q)
	if err != nil {
		return errorResponse(req, err)
	}
	ts := int64(-1)
	if start < hw {
		res, err := s.broker.Read(t.Name, q, start, broker.ReadOptions{MaxRecords: 1})
		if err != nil {
			return errorResponse(req, err)
		}
		if len(res.Records) > 0 {
			ts = res.Records[0].StoreTime
		}
		res.Release()
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("timestamp", strconv.FormatInt(ts, 10))
	return resp
}

type connection struct {
	ClientID   string `json:"clientId"`
	ClientAddr string `json:"clientAddr"`
	Language   string `json:"language"`
	Version    int32  `json:"version"`
}

func handleGetConsumerConnectionList(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group := req.Ext("consumerGroup")
	s.clients.mu.Lock()
	members := s.clients.consumers[group]
	conns := []connection{}
	subs := map[string]subscription{}
	var data consumerData
	for id, cl := range members {
		conns = append(conns, connection{ClientID: id, ClientAddr: cl.conn.nc.RemoteAddr().String(), Language: cl.language, Version: cl.version})
		for _, sub := range cl.data.Subscriptions {
			subs[sub.Topic] = sub
		}
		data = cl.data
	}
	s.clients.mu.Unlock()
	if len(conns) == 0 {
		return protocol.NewResponse(req, protocol.ConsumerNotOnline, "no consumer of group "+group+" is online")
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(map[string]any{"connectionSet": conns, "subscriptionTable": subs,
		"consumeType": data.ConsumeType, "messageModel": data.MessageModel, "consumeFromWhere": data.ConsumeFromWhere})
	return resp
}
