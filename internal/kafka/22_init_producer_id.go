package kafka

// InitProducerId (key 22), versions 0-4.
//
// Version notes: idempotent producers get a fresh producer id (allocated in
// durable blocks, never reused) with epoch 0. v3+ requests that carry an
// existing id and epoch (KIP-360) get the same id with the epoch bumped.
//
// Not implemented: transactional ids (no transaction coordinator yet) are
// answered with COORDINATOR_NOT_AVAILABLE, so a transactional producer fails
// loudly instead of silently losing atomicity.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleInitProducerID(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return reply{resp: resp}
	}
	if req.Version >= 3 && req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < 32767 {
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
		return reply{resp: resp}
	}
	id, err := rc.srv().producers.NewProducerID(rc.ctx())
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return reply{resp: resp}
}
