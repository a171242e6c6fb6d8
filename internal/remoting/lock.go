package remoting

// LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the queue locks of ordered
// consumers (leases of 60 s, renewed by clients every 20 s; see
// internal/broker/locks). The answer to a lock lists the queues the client
// now holds; the others stay with their live holders.

import (
	"encoding/json"

	"github.com/rosettamq/rosetta/internal/broker/locks"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

type messageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

type lockBody struct {
	ConsumerGroup string         `json:"consumerGroup"`
	ClientID      string         `json:"clientId"`
	MQSet         []messageQueue `json:"mqSet"`
}

func decodeLockBody(req *protocol.Command) (lockBody, []locks.Queue, *protocol.Command) {
	var b lockBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return b, nil, protocol.NewResponse(req, protocol.SystemError, "lock body: "+err.Error())
	}
	qs := make([]locks.Queue, len(b.MQSet))
	for i, mq := range b.MQSet {
		qs[i] = locks.Queue{Topic: mq.Topic, Index: mq.QueueID}
	}
	return b, qs, nil
}

func handleLockBatch(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	b, qs, bad := decodeLockBody(req)
	if bad != nil {
		return bad
	}
	got := s.locks.TryLock(b.ConsumerGroup, b.ClientID, qs)
	out := make([]messageQueue, len(got))
	for i, q := range got {
		out[i] = messageQueue{Topic: q.Topic, BrokerName: s.opts.BrokerName, QueueID: q.Index}
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(map[string][]messageQueue{"lockOKMQSet": out})
	return resp
}

func handleUnlockBatch(rc *reqCtx, req *protocol.Command) *protocol.Command {
	b, qs, bad := decodeLockBody(req)
	if bad != nil {
		return bad
	}
	rc.conn.s.locks.Unlock(b.ConsumerGroup, b.ClientID, qs)
	return protocol.NewResponse(req, protocol.Success, "")
}
