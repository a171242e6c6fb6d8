package kafka

// AddOffsetsToTxn (key 25), versions 0-3.
//
// Version notes: adds a consumer group to the producer's transaction, so
// its TxnOffsetCommit offsets commit or vanish with it.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleAddOffsetsToTxn(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	s := rc.srv()
	txns, err := s.txnCoordinator(req.TransactionalID)
	switch {
	case !rc.allowedTxnID(req.TransactionalID, security.OpWrite):
		err = errTxnIDAuthorization
	case !rc.allowedGroup(req.Group, security.OpRead):
		err = errGroupAuthorization
	case err == nil:
		err = txns.AddOffsets(rc.ctx(), req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group)
	}
	resp.ErrorCode = errorCode(err)
	return reply{resp: resp}
}
