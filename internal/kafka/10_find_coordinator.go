package kafka

// FindCoordinator (key 10), versions 0-4.
//
// Version notes: a group's coordinator is the leader of the consumer
// offsets partition its records go to (Kafka's hash placement, through the
// broker's router); this node coordinates every transactional id. v4
// batches keys (CoordinatorKeys) and answers one coordinator per key.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleFindCoordinator(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	s := rc.srv()
	host, port := s.advertised(rc.conn)
	denied := func(key string) int16 {
		switch {
		case req.CoordinatorType == 0 && !rc.allowedGroup(key, security.OpDescribe):
			return kerr.GroupAuthorizationFailed.Code
		case req.CoordinatorType == 1 && !rc.allowedTxnID(key, security.OpDescribe):
			return kerr.TransactionalIDAuthorizationFailed.Code
		case req.CoordinatorType == 0:
			if loc, _ := s.cat().GroupCoordinator(key); loc.Leader < 0 {
				return kerr.CoordinatorNotAvailable.Code
			} else if !loc.Local {
				return kerr.NotCoordinator.Code // another node's: clients ask again (a cluster answers its address)
			}
		}
		return 0
	}
	if req.Version >= 4 {
		for _, k := range req.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key = k
			c.NodeID = s.opts.NodeID
			c.Host = host
			c.Port = port
			if c.ErrorCode = denied(k); c.ErrorCode != 0 {
				c.NodeID, c.Host, c.Port = -1, "", -1
			}
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return reply{resp: resp}
	}
	if resp.ErrorCode = denied(req.CoordinatorKey); resp.ErrorCode != 0 {
		resp.NodeID, resp.Port = -1, -1
		return reply{resp: resp}
	}
	resp.NodeID, resp.Host, resp.Port = s.opts.NodeID, host, port
	return reply{resp: resp}
}
