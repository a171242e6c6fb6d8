package kafka

// EndTxn (key 26), versions 0-3.
//
// Version notes: commits or aborts the producer's transaction: the prepare
// record and a marker for every partition are written in one append, the
// group offsets of a commit are committed, and the transaction is recorded
// complete before the answer (so the next transaction may start at once).
// A retried end that already completed succeeds; ending with the other
// result is INVALID_TXN_STATE; a stale epoch PRODUCER_FENCED.
//
// Not implemented: v4 (TRANSACTION_ABORTABLE) and v5 (KIP-890 epoch bumps;
// transaction.version 2 is not advertised).

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleEndTxn(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	s := rc.srv()
	txns, err := s.txnCoordinator(req.TransactionalID)
	switch {
	case !rc.allowedTxnID(req.TransactionalID, security.OpWrite):
		err = errTxnIDAuthorization
	case err == nil:
		err = txns.EndTxn(rc.ctx(), req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	}
	if err != nil {
		rc.conn.log.Debug("end transaction refused", "transactional_id", req.TransactionalID, "commit", req.Commit, "err", err)
	}
	resp.ErrorCode = errorCode(err)
	return reply{resp: resp}
}
