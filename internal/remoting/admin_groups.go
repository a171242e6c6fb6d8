package remoting

// Group and statistics admin requests of mqadmin- and dashboard-style tools:
// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
// (201: stored configs, plus groups seen by offsets or live consumers with
// the defaults), DELETE_SUBSCRIPTIONGROUP (207, cleanOffset drops the
// offsets too), GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208: lag per
// queue), INVOKE_BROKER_TO_RESET_OFFSET (222) and GET_BROKER_RUNTIME_INFO
// (28). Maps keyed by message queue use fastjson's object keys, as the Java
// broker writes them.

import (
	"encoding/json"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// subscriptionGroupConfig is RocketMQ's SubscriptionGroupConfig: the
// broker's group config under RocketMQ's field names.
type subscriptionGroupConfig struct {
	GroupName string `json:"groupName"`
	broker.GroupConfig
}

func fromGroupConfig(c broker.GroupConfig) subscriptionGroupConfig {
	return subscriptionGroupConfig{GroupName: c.Name, GroupConfig: c}
}

func handleUpdateSubscriptionGroup(rc *reqCtx, req *protocol.Command) *protocol.Command {
	// Fields the body leaves out keep RocketMQ's defaults.
	sg := fromGroupConfig(broker.DefaultGroupConfig(""))
	if err := json.Unmarshal(req.Body, &sg); err != nil || sg.GroupName == "" {
		return protocol.NewResponse(req, protocol.InvalidParameter, "subscription group config: want a JSON body with groupName")
	}
	c := sg.GroupConfig
	c.Name = sg.GroupName
	if err := rc.conn.s.broker.SetGroupConfig(rc.ctx, c); err != nil {
		return errorResponse(req, err)
	}
	rc.conn.log.Info("subscription group updated", "group", c.Name)
	return protocol.NewResponse(req, protocol.Success, "")
}

func handleGetAllSubscriptionGroups(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	table := map[string]subscriptionGroupConfig{}
	for _, g := range s.broker.OffsetGroups() {
		table[g] = fromGroupConfig(broker.DefaultGroupConfig(g))
	}
	s.clients.mu.Lock()
	for g := range s.clients.consumers {
		table[g] = fromGroupConfig(broker.DefaultGroupConfig(g))
	}
	s.clients.mu.Unlock()
	for _, c := range s.broker.GroupConfigs() {
		table[c.Name] = fromGroupConfig(c)
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(map[string]any{"subscriptionGroupTable": table,
		"dataVersion": map[string]int64{"timestamp": time.Now().UnixMilli(), "counter": int64(len(table))}})
	return resp
}

func handleDeleteSubscriptionGroup(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group := req.Ext("groupName")
	if err := s.broker.DeleteGroupConfig(rc.ctx, group); err != nil {
		return errorResponse(req, err)
	}
	if req.Ext("cleanOffset") == "true" {
		if err := s.broker.DeleteGroupOffsets(rc.ctx, group); err != nil {
			return errorResponse(req, err)
		}
	}
	rc.conn.log.Info("subscription group deleted", "group", group, "cleanOffset", req.Ext("cleanOffset"))
	return protocol.NewResponse(req, protocol.Success, "")
}

func handleGetTopicStats(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, err := s.lookupTopic(req.Ext("topic"))
	if err != nil {
		return errorResponse(req, err)
	}
	name := rmqName(t.Name)
	var entries []protocol.QueueEntry
	_, sizes := s.broker.TopicBytes(t)
	for i := range t.Queues {
		start, hw, _, err := s.broker.Offsets(t.Name, int32(i))
		if err != nil {
			return errorResponse(req, err)
		}
		last := int64(0)
		if hw > start {
			last = s.storeTimeAt(t.Queues[i], hw-1)
		}
		// storeBytes (Rosetta's): what the queue's retained messages occupy.
		v, _ := json.Marshal(map[string]int64{"minOffset": int64(start), "maxOffset": int64(hw), "lastUpdateTimestamp": last, "storeBytes": sizes[i]})
		entries = append(entries, protocol.QueueEntry{Topic: name, BrokerName: s.opts.BrokerName, QueueID: int32(i), Value: v})
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body = append(protocol.AppendQueueMap([]byte(`{"offsetTable":`), entries), '}')
	return resp
}

// storeTimeAt is the store time of the message at a queue offset (0 when
// it cannot be read).
func (s *Server) storeTimeAt(q model.QueueID, off model.QueueOffset) int64 {
	res, err := s.broker.ReadQueue(q, off, broker.ReadOptions{MaxRecords: 1})
	if err != nil {
		return 0
	}
	defer res.Release()
	if len(res.Records) == 0 {
		return 0
	}
	return res.Records[0].StoreTime
}

// groupTopics lists the topics a group consumes: those its live consumers
// subscribe to and those it has offsets in.
func (s *Server) groupTopics(group string) []*topicRef {
	seen := map[string]*topicRef{}
	for t := range s.broker.FetchAllOffsets(group) {
		seen[t.Name.String()] = t
	}
	s.clients.mu.Lock()
	var subs []string
	for _, cl := range s.clients.consumers[group] {
		for _, sub := range cl.data.Subscriptions {
			subs = append(subs, sub.Topic)
		}
	}
	s.clients.mu.Unlock()
	for _, name := range subs {
		if t, err := s.lookupTopic(name); err == nil {
			seen[t.Name.String()] = t
		}
	}
	out := make([]*topicRef, 0, len(seen))
	for _, t := range seen {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name.String() < out[j].Name.String() })
	return out
}

func handleGetConsumeStats(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group := req.Ext("consumerGroup")
	topics := s.groupTopics(group)
	if want := req.Ext("topic"); want != "" {
		t, err := s.lookupTopic(want)
		if err != nil {
			return errorResponse(req, err)
		}
		topics = []*topicRef{t}
	}
	var entries []protocol.QueueEntry
	for _, t := range topics {
		committed, err := s.broker.FetchOffsets(group, t.Name)
		if err != nil {
			return errorResponse(req, err)
		}
		for i := range t.Queues {
			_, hw, _, err := s.broker.Offsets(t.Name, int32(i))
			if err != nil {
				return errorResponse(req, err)
			}
			consumer, last := int64(0), int64(0)
			if c, ok := committed[int32(i)]; ok {
				consumer = int64(c.Offset)
				if c.Offset > 0 {
					last = s.storeTimeAt(t.Queues[i], c.Offset-1)
				}
			}
			v, _ := json.Marshal(map[string]int64{"brokerOffset": int64(hw), "consumerOffset": consumer,
				"pullOffset": consumer, "lastTimestamp": last})
			entries = append(entries, protocol.QueueEntry{Topic: rmqName(t.Name), BrokerName: s.opts.BrokerName, QueueID: int32(i), Value: v})
		}
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	body := protocol.AppendQueueMap([]byte(`{"offsetTable":`), entries)
	resp.Body = append(body, `,"consumeTps":0.0}`...)
	return resp
}

// handleResetOffset moves a group's offsets on a topic to the first message
// at or after a time (only backwards unless isForce), stores them on the
// broker so offline groups are reset too, and tells each online consumer of
// the group with a one-way RESET_CONSUMER_CLIENT_OFFSET. The answer carries
// the new offsets.
func handleResetOffset(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group, topic := req.Ext("group"), req.Ext("topic")
	ts, err := strconv.ParseInt(req.Ext("timestamp"), 10, 64)
	if err != nil {
		return protocol.NewResponse(req, protocol.InvalidParameter, "timestamp "+req.Ext("timestamp"))
	}
	t, err := s.lookupTopic(topic)
	if err != nil {
		return errorResponse(req, err)
	}
	force := req.Ext("isForce") != "false"
	committed, err := s.broker.FetchOffsets(group, t.Name)
	if err != nil {
		return errorResponse(req, err)
	}
	commits := map[int32]broker.OffsetCommit{}
	var entries []protocol.QueueEntry
	for i := range t.Queues {
		off, _, err := s.broker.OffsetForTime(t.Name, int32(i), ts)
		if err != nil {
			return errorResponse(req, err)
		}
		if c, ok := committed[int32(i)]; ok && !force && c.Offset < off {
			off = c.Offset
		}
		commits[int32(i)] = broker.OffsetCommit{Offset: off, LeaderEpoch: -1}
		entries = append(entries, protocol.QueueEntry{Topic: topic, BrokerName: s.opts.BrokerName, QueueID: int32(i),
			Value: strconv.AppendInt(nil, int64(off), 10)})
	}
	if err := s.broker.CommitOffsets(rc.ctx, group, t.Name, commits); err != nil {
		return errorResponse(req, err)
	}
	body := append(protocol.AppendQueueMap([]byte(`{"offsetTable":`), entries), '}')
	for _, c := range s.clients.members(group) {
		c.sendOneway(&protocol.Command{Code: protocol.ResetConsumerClientOffset, Language: "GO", Version: protocol.Version,
			ExtFields: protocol.Pairs("topic", topic, "group", group, "timestamp", req.Ext("timestamp")), Body: body})
	}
	rc.conn.log.Info("consumer offsets reset by time", "group", group, "topic", topic, "timestamp", ts, "force", force)
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body = body
	return resp
}

// serverStats counts messages for GET_BROKER_RUNTIME_INFO.
type serverStats struct {
	started  time.Time
	put, got atomic.Int64
}

// handleGetBrokerRuntimeInfo answers the KVTable dashboards read. Rates are
// averages since start.
func handleGetBrokerRuntimeInfo(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	put, got := s.stats.put.Load(), s.stats.got.Load()
	secs := max(time.Since(s.stats.started).Seconds(), 1)
	rate := func(n int64) string {
		r := strconv.FormatFloat(float64(n)/secs, 'f', 2, 64)
		return r + " " + r + " " + r
	}
	table := map[string]string{
		"brokerVersionDesc":           "V5_3_0",
		"brokerVersion":               strconv.Itoa(protocol.Version),
		"bootTimestamp":               strconv.FormatInt(s.stats.started.UnixMilli(), 10),
		"runtime":                     "[ " + time.Since(s.stats.started).Round(time.Second).String() + " ]",
		"msgPutTotalTodayNow":         strconv.FormatInt(put, 10),
		"msgGetTotalTodayNow":         strconv.FormatInt(got, 10),
		"msgPutTotalTodayMorning":     "0",
		"msgGetTotalTodayMorning":     "0",
		"msgPutTotalYesterdayMorning": "0",
		"msgGetTotalYesterdayMorning": "0",
		"putTps":                      rate(put),
		"getTransferedTps":            rate(got),
		"getTotalTps":                 rate(got),
		"sendThreadPoolQueueSize":     "0",
		"pullThreadPoolQueueSize":     "0",
		"dispatchBehindBytes":         "0",
		"pageCacheLockTimeMills":      "0",
	}
	if total, free, err := s.broker.DiskSpace(); err == nil && total > 0 {
		table["commitLogDiskRatio"] = strconv.FormatFloat(1-float64(free)/float64(total), 'f', 4, 64)
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(map[string]any{"table": table})
	return resp
}
