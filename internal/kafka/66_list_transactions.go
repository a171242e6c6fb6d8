package kafka

// ListTransactions (key 66), versions 0-1: transactional ids filtered by
// state, producer id and (v1) how long their transaction has been open.
// Unknown state names come back in UnknownStateFilters.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/broker/txn"
)

func handleListTransactions(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	s := rc.srv()
	var states []txn.State
	for _, f := range req.StateFilters {
		if st, ok := txn.ParseState(f); ok {
			states = append(states, st)
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, f)
		}
	}
	if len(req.StateFilters) > 0 && len(states) == 0 {
		return reply{resp: resp}
	}
	now := s.cat().Now().UnixMilli()
	// The transactional ids this node coordinates (kadm asks every broker).
	var listed []txn.Status
	for _, be := range s.attached() {
		if be.txns == nil {
			continue
		}
		for _, st := range be.txns.List(states, req.ProducerIDFilters) {
			if s.coordinatorGroup(st.ID) == be.group {
				listed = append(listed, st)
			}
		}
	}
	for _, st := range listed {
		if req.DurationFilterMillis >= 0 && req.Version >= 1 && (st.StartMs < 0 || now-st.StartMs < req.DurationFilterMillis) {
			continue
		}
		if !rc.allowedTxnID(st.ID, security.OpDescribe) {
			continue
		}
		ts := kmsg.NewListTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ProducerID, ts.TransactionState = st.ID, st.PID, st.State.String()
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return reply{resp: resp}
}
