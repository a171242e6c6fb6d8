package kafka

// AddPartitionsToTxn (key 24), versions 0-3.
//
// Version notes: adds the partitions to the producer's transaction (opening
// it), durably, before the producer may write to them; the produce path
// refuses transactional batches for partitions not added (INVALID_TXN_STATE),
// so a fenced producer cannot write. An unknown topic or partition fails
// with UNKNOWN_TOPIC_OR_PARTITION and the others with
// OPERATION_NOT_ATTEMPTED, as Kafka answers.
//
// Not implemented: v4+ (the broker-to-broker batched form of KIP-890).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/broker/txn"
)

func handleAddPartitionsToTxn(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	s := rc.srv()
	var parts []txn.Partition
	bad := map[string]map[int32]int16{}
	txnDenied := !rc.allowedTxnID(req.TransactionalID, security.OpWrite)
	for _, rt := range req.Topics {
		t, err := rc.lookupTopic(rt.Topic)
		topicDenied := !rc.allowedTopic(rt.Topic, security.OpWrite)
		for _, p := range rt.Partitions {
			code := int16(0)
			switch {
			case txnDenied:
				code = kerr.TransactionalIDAuthorizationFailed.Code
			case topicDenied:
				code = kerr.TopicAuthorizationFailed.Code
			case err != nil:
				code = errorCode(err)
			case p < 0 || int(p) >= len(t.All):
				code = kerr.UnknownTopicOrPartition.Code
			case t.Internal:
				code = kerr.TopicAuthorizationFailed.Code
			default:
				parts = append(parts, txn.Partition{Topic: t.Name, Index: p, Queue: t.All[p]})
				continue
			}
			if bad[rt.Topic] == nil {
				bad[rt.Topic] = map[int32]int16{}
			}
			bad[rt.Topic][p] = code
		}
	}
	txns, err := s.txnCoordinator(req.TransactionalID)
	if err == nil && len(bad) == 0 {
		err = txns.AddPartitions(rc.ctx(), req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts)
	}
	if err != nil {
		rc.conn.log.Debug("add partitions to transaction refused", "transactional_id", req.TransactionalID, "err", err)
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewAddPartitionsToTxnResponseTopic()
		tr.Topic = rt.Topic
		for _, p := range rt.Partitions {
			code := errorCode(err)
			if len(bad) > 0 {
				code = kerr.OperationNotAttempted.Code
				if c, ok := bad[rt.Topic][p]; ok {
					code = c
				}
			}
			apttrtp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			apttrtp.Partition = p
			apttrtp.ErrorCode = code
			tr.Partitions = append(tr.Partitions, apttrtp)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
