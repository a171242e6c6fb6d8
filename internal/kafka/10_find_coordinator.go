package kafka

// FindCoordinator (key 10), versions 0-4.
//
// Version notes: a consumer group or transactional id is coordinated by the
// leader of the replication group its id hashes to (Kafka's hash of the key
// over the groups; on a single node, or a cluster of one group, that is the
// one leader), the same answer from every node; COORDINATOR_NOT_AVAILABLE
// while that group has no leader. v4 batches keys (CoordinatorKeys) and
// answers one coordinator per key.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleFindCoordinator(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	s := rc.srv()
	brokers := s.brokers(rc.conn)
	find := func(key string) (brokerAddr, int16) {
		switch {
		case req.CoordinatorType == 0 && !rc.allowedGroup(key, security.OpDescribe):
			return brokerAddr{}, kerr.GroupAuthorizationFailed.Code
		case req.CoordinatorType == 1 && !rc.allowedTxnID(key, security.OpDescribe):
			return brokerAddr{}, kerr.TransactionalIDAuthorizationFailed.Code
		}
		leader, _ := s.groupLeader(s.coordinatorGroup(key))
		for _, b := range brokers {
			if b.id == leader {
				return b, 0
			}
		}
		return brokerAddr{}, kerr.CoordinatorNotAvailable.Code
	}
	if req.Version >= 4 {
		for _, k := range req.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key = k
			b, code := find(k)
			c.NodeID, c.Host, c.Port, c.ErrorCode = b.id, b.host, b.port, code
			if code != 0 {
				c.NodeID, c.Host, c.Port = -1, "", -1
			}
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return reply{resp: resp}
	}
	b, code := find(req.CoordinatorKey)
	if resp.ErrorCode = code; code != 0 {
		resp.NodeID, resp.Port = -1, -1
		return reply{resp: resp}
	}
	resp.NodeID, resp.Host, resp.Port = b.id, b.host, b.port
	return reply{resp: resp}
}
