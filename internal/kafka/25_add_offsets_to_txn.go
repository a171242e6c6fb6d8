package kafka

// AddOffsetsToTxn (key 25), versions 0-3.
//
// Version notes: adds a consumer group to the producer's transaction, so
// its TxnOffsetCommit offsets commit or vanish with it.

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleAddOffsetsToTxn(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	s := rc.srv()
	err := error(errNoTxnCoordinator)
	if s.txns != nil {
		err = s.txns.AddOffsets(rc.ctx(), req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group)
	}
	resp.ErrorCode = errorCode(err)
	return reply{resp: resp}
}
