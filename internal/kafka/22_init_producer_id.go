package kafka

// InitProducerId (key 22), versions 0-4.
//
// Version notes: idempotent producers get a fresh producer id (allocated in
// durable blocks, never reused) with epoch 0. v3+ requests that carry an
// existing id and epoch (KIP-360) get the same id with the epoch bumped.
// Transactional producers get their transactional id's producer id with a
// new epoch from the transaction coordinator, which fences the previous
// producer (its open transaction is aborted); a transaction timeout above
// broker.transaction_max_timeout is INVALID_TRANSACTION_TIMEOUT.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleInitProducerID(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	s := rc.srv()
	reqPID, reqEpoch := req.ProducerID, req.ProducerEpoch
	if req.Version < 3 {
		reqPID, reqEpoch = -1, -1
	}
	if req.TransactionalID != nil && *req.TransactionalID != "" {
		if !rc.allowedTxnID(*req.TransactionalID, security.OpWrite) {
			resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			return reply{resp: resp}
		}
		txns, err := s.txnCoordinator(*req.TransactionalID)
		if err != nil {
			resp.ErrorCode = errorCode(err)
			return reply{resp: resp}
		}
		pid, epoch, err := txns.InitProducerID(rc.ctx(), *req.TransactionalID,
			time.Duration(req.TransactionTimeoutMillis)*time.Millisecond, reqPID, reqEpoch)
		if err != nil {
			rc.conn.log.Debug("init producer id refused", "transactional_id", *req.TransactionalID, "err", err)
			resp.ErrorCode = errorCode(err)
			return reply{resp: resp}
		}
		resp.ProducerID, resp.ProducerEpoch = pid, epoch
		return reply{resp: resp}
	}
	// An idempotent producer needs IdempotentWrite on the cluster or Write
	// on some topic (Kafka 3's rule).
	if !rc.authorizedCluster(security.OpIdempotentWrite) && !rc.authorizedAny(security.ResourceTopic, security.OpWrite) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return reply{resp: resp}
	}
	if reqPID >= 0 && reqEpoch >= 0 && reqEpoch < 32767 {
		resp.ProducerID, resp.ProducerEpoch = reqPID, reqEpoch+1
		return reply{resp: resp}
	}
	be := s.any()
	if be == nil {
		resp.ErrorCode = errorCode(errNoBackend)
		return reply{resp: resp}
	}
	id, err := be.producers.NewProducerID(rc.ctx())
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return reply{resp: resp}
}
