package admin

import (
	"net/http"
	"strconv"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
)

// Transactions in doubt: Kafka transactions left open (a hanging one holds
// back every read_committed consumer of its partitions) and RocketMQ half
// messages whose producer never answered, with what resolves them.

func registerTransactionAPI(mux *http.ServeMux, b *broker.Broker, txns *txn.Coordinator, sec Security) {
	mux.HandleFunc("GET /api/v1/transactions", sec.guard(func(w http.ResponseWriter, _ *http.Request) {
		out := apiv1.Transactions{Kafka: []apiv1.KafkaTransaction{}, RocketMQ: []apiv1.HalfMessage{}}
		if txns != nil {
			for _, st := range txns.List([]txn.State{txn.StateOngoing, txn.StatePrepareCommit, txn.StatePrepareAbort}, nil) {
				kt := apiv1.KafkaTransaction{ID: st.ID, ProducerID: st.PID, Epoch: st.Epoch, State: st.State.String(),
					TimeoutMs: st.TimeoutMs, StartMs: st.StartMs, Partitions: []apiv1.TopicPartition{}, Groups: st.Groups}
				for _, p := range st.Partitions {
					kt.Partitions = append(kt.Partitions, apiv1.TopicPartition{Topic: p.Topic.Short(), Partition: p.Index})
				}
				out.Kafka = append(out.Kafka, kt)
			}
		}
		for _, h := range b.PendingHalves(1000) {
			out.RocketMQ = append(out.RocketMQ, apiv1.HalfMessage{Offset: int64(h.Offset), Group: h.Group, Topic: h.Topic,
				MessageID: h.MessageID, Keys: h.Keys, StoredMs: h.StoredMs, Checks: h.Checks, NextCheckMs: h.NextCheckMs})
		}
		writeJSON(w, out)
	}))
	// Abort a Kafka transaction now, as its timeout would: its producer is
	// fenced.
	mux.HandleFunc("POST /api/v1/transactions/kafka/{id}/abort", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		if txns == nil {
			apiError(w, http.StatusNotFound, "not_found", "no Kafka transaction coordinator")
			return
		}
		if err := txns.Abort(r.Context(), r.PathValue("id")); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	// Commit or roll back a RocketMQ half message for its producer.
	mux.HandleFunc("POST /api/v1/transactions/rocketmq/{offset}/{action}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		off, err := strconv.ParseInt(r.PathValue("offset"), 10, 64)
		action := r.PathValue("action")
		if err != nil || action != "commit" && action != "rollback" {
			apiError(w, http.StatusBadRequest, "bad_request", "POST …/transactions/rocketmq/<offset>/commit or …/rollback")
			return
		}
		var group string
		for _, h := range b.PendingHalves(1 << 20) {
			if int64(h.Offset) == off {
				group = h.Group
			}
		}
		if group == "" {
			apiError(w, http.StatusNotFound, "not_found", "no pending half message at offset "+r.PathValue("offset"))
			return
		}
		topic, queue, at, err := b.EndTransaction(broker.WithTraceSource(r.Context(), "admin", r.RemoteAddr), group, model.QueueOffset(off), action == "commit")
		if err != nil {
			writeErr(w, err)
			return
		}
		if action == "rollback" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, apiv1.MessageSent{Topic: topic.Short(), Queue: apiQueueNamed(b, topic.String(), queue), Offset: int64(at)})
	}))
}
