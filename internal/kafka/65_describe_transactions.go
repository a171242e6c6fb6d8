package kafka

// DescribeTransactions (key 65), version 0: the coordinator's state of each
// transactional id (TRANSACTIONAL_ID_NOT_FOUND for unknown ones).

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/broker/txn"
)

func handleDescribeTransactions(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	s := rc.srv()
	for _, id := range req.TransactionalIDs {
		ts := kmsg.NewDescribeTransactionsResponseTransactionState()
		ts.TransactionalID = id
		ts.ProducerID = -1
		ts.ProducerEpoch = -1
		ts.StartTimestamp = -1
		if !rc.allowedTxnID(id, security.OpDescribe) {
			ts.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		txns, err := s.txnCoordinator(id)
		var st txn.Status
		if err == nil {
			st, err = txns.Describe(id)
		}
		if err != nil {
			ts.ErrorCode = errorCode(err)
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		ts.State, ts.TimeoutMillis, ts.StartTimestamp = st.State.String(), st.TimeoutMs, st.StartMs
		ts.ProducerID, ts.ProducerEpoch = st.PID, st.Epoch
		ts.Topics = s.txnTopics(rc.conn.home, st.Partitions)
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return reply{resp: resp}
}

// txnTopics groups a transaction's partitions by Kafka topic name.
func (s *Server) txnTopics(h home, parts []txn.Partition) []kmsg.DescribeTransactionsResponseTransactionStateTopic {
	byTopic := map[string][]int32{}
	for _, p := range parts {
		name := p.Topic.Short()
		if t, err := s.cat().Topic(p.Topic); err == nil {
			name = kafkaName(h, t)
		}
		byTopic[name] = append(byTopic[name], p.Index)
	}
	out := make([]kmsg.DescribeTransactionsResponseTransactionStateTopic, 0, len(byTopic))
	for name, ps := range byTopic {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		txnTopic := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
		txnTopic.Topic = name
		txnTopic.Partitions = ps
		out = append(out, txnTopic)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}
