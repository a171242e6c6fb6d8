package remoting

// Broker-side load balancing for RocketMQ 5 remoting consumers that ask
// for it (clientRebalance=false): QUERY_ASSIGNMENT (400) answers the
// queues a member reads and how — PULL (the queues divided among the
// group's members by the client's strategy, AVG or AVG_BY_CIRCLE) or POP
// (with popShareQueueNum 0 every member pops every queue, as queue id -1;
// otherwise its own share plus that of the next popShareQueueNum members).
// SET_MESSAGE_REQUEST_MODE (401) stores a group's mode for a topic (what
// `mqadmin setConsumeMode` sends); retry topics always read by PULL.

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

type assignmentQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

type queueAssignment struct {
	MessageQueue assignmentQueue   `json:"messageQueue"`
	Mode         string            `json:"mode"`
	Attachments  map[string]string `json:"attachments"`
}

func handleQueryAssignment(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	var body struct {
		Topic         string
		ConsumerGroup string
		ClientID      string `json:"clientId"`
		StrategyName  string
		MessageModel  string
	}
	if err := json.Unmarshal(req.Body, &body); err != nil || body.Topic == "" || body.ConsumerGroup == "" {
		return protocol.NewResponse(req, protocol.InvalidParameter, "query assignment: topic and consumerGroup required")
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	t, err := s.lookupTopic(body.Topic)
	if err != nil {
		// No such topic: no assignment (the client keeps what it has).
		resp.Body = []byte(`{"messageQueueAssignments":null}`)
		return resp
	}
	mode := broker.RequestMode{Mode: broker.RequestModePull}
	if !strings.HasPrefix(body.Topic, "%RETRY%") {
		mode = s.broker.RequestModeOf(body.ConsumerGroup, t.Name)
	}
	ids := make([]int32, len(t.Queues))
	for i := range ids {
		ids[i] = int32(i)
	}
	var assigned []int32
	switch {
	case body.MessageModel == "BROADCASTING":
		assigned = ids
	case mode.Mode == broker.RequestModePop && mode.PopShareQueueNum <= 0:
		assigned = []int32{-1}
	default:
		members := s.clients.consumerIDs(body.ConsumerGroup, time.Now())
		if !slices.Contains(members, body.ClientID) {
			members = append(members, body.ClientID)
		}
		slices.Sort(members)
		if body.StrategyName != "" && body.StrategyName != "AVG" && body.StrategyName != "AVG_BY_CIRCLE" {
			s.log.Info("query assignment: unknown strategy, answering none", "strategy", body.StrategyName, "group", body.ConsumerGroup)
			resp.Body = []byte(`{"messageQueueAssignments":null}`)
			return resp
		}
		share := 0
		if mode.Mode == broker.RequestModePop {
			share = mode.PopShareQueueNum
		}
		assigned = assignQueues(ids, members, body.ClientID, body.StrategyName == "AVG_BY_CIRCLE", share)
	}
	out := make([]queueAssignment, 0, len(assigned))
	for _, q := range assigned {
		out = append(out, queueAssignment{MessageQueue: assignmentQueue{Topic: body.Topic, BrokerName: s.opts.BrokerName, QueueID: q},
			Mode: mode.Mode, Attachments: map[string]string{}})
	}
	resp.Body, _ = json.Marshal(map[string]any{"messageQueueAssignments": out})
	return resp
}

// assignQueues divides queues among sorted members as the client strategies
// do; with share > 0 (POP) a member also reads the shares of the next share
// members. With more members than queues, POP still gives each member one
// queue.
func assignQueues(queues []int32, members []string, me string, circle bool, share int) []int32 {
	idx := slices.Index(members, me)
	if idx < 0 || len(queues) == 0 {
		return nil
	}
	if share > 0 && len(members) > len(queues) {
		return []int32{queues[idx%len(queues)]}
	}
	own := func(i int) []int32 {
		if circle {
			var out []int32
			for j := i; j < len(queues); j += len(members) {
				out = append(out, queues[j])
			}
			return out
		}
		n, m := len(queues), len(members)
		mod := n % m
		size := n / m
		if n <= m {
			size = 1
		} else if mod > 0 && i < mod {
			size++
		}
		start := i*size + mod
		if mod > 0 && i < mod {
			start = i * size
		}
		var out []int32
		for k := 0; k < min(size, n-start); k++ {
			out = append(out, queues[(start+k)%n])
		}
		return out
	}
	out := own(idx)
	for k := 1; k <= share; k++ {
		for _, q := range own((idx + k) % len(members)) {
			if !slices.Contains(out, q) {
				out = append(out, q)
			}
		}
	}
	return out
}

func handleSetMessageRequestMode(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	var body struct {
		Topic            string
		ConsumerGroup    string
		Mode             string
		PopShareQueueNum int
	}
	if err := json.Unmarshal(req.Body, &body); err != nil || body.Topic == "" || body.ConsumerGroup == "" {
		return protocol.NewResponse(req, protocol.InvalidParameter, "set message request mode: topic and consumerGroup required")
	}
	if strings.HasPrefix(body.Topic, "%RETRY%") {
		return protocol.NewResponse(req, protocol.NoPermission, "retry topic is not allowed to set mode")
	}
	if body.Mode == "" {
		body.Mode = broker.RequestModePull
	}
	t, err := s.lookupTopic(body.Topic)
	if err != nil {
		return errorResponse(req, err)
	}
	if err := s.broker.SetRequestMode(rc.ctx, body.ConsumerGroup, t.Name, broker.RequestMode{Mode: body.Mode, PopShareQueueNum: body.PopShareQueueNum}); err != nil {
		return protocol.NewResponse(req, protocol.InvalidParameter, err.Error())
	}
	s.log.Info("message request mode set", "group", body.ConsumerGroup, "topic", body.Topic, "mode", body.Mode, "popShareQueueNum", body.PopShareQueueNum)
	return protocol.NewResponse(req, protocol.Success, "")
}
