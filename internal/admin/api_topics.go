package admin

import (
	"encoding/hex"
	"net/http"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// TopicSummary is a topic in the topic list.
type TopicSummary struct {
	Name           string `json:"name"`      // as clients name it: orders, ns/orders, tenant/ns/orders
	FullName       string `json:"full_name"` // tenant/namespace/topic
	ID             string `json:"id"`
	Queues         int    `json:"queues"`
	Messages       int64  `json:"messages"` // offsets held: end − start, summed over the queues
	Bytes          int64  `json:"bytes"`
	RetentionMs    int64  `json:"retention_ms"`    // effective; -1 keeps forever
	RetentionBytes int64  `json:"retention_bytes"` // per queue, effective; -1 unlimited
	CreatedMs      int64  `json:"created_ms"`
	Internal       bool   `json:"internal,omitempty"`
}

// QueueInfo is one queue of a topic (Kafka partition, RocketMQ queue id).
type QueueInfo struct {
	Queue int32 `json:"queue"`
	Start int64 `json:"start"` // first offset held
	End   int64 `json:"end"`   // next offset to be written (Kafka high watermark)
	Bytes int64 `json:"bytes"`
}

// TopicDetail is one topic with its queues and configuration.
type TopicDetail struct {
	TopicSummary
	QueueList []QueueInfo        `json:"queue_list"`
	Config    broker.TopicConfig `json:"config"`
}

// topicCreate is the body of POST /api/v1/topics.
type topicCreate struct {
	Name   string             `json:"name"`
	Queues int                `json:"queues"`
	Config broker.TopicConfig `json:"config"`
}

func topicSummary(b *broker.Broker, t *broker.Topic) (TopicSummary, []QueueInfo) {
	s := TopicSummary{Name: t.Name.Short(), FullName: t.FullName, ID: hex.EncodeToString(t.ID[:]), Queues: t.QueueCount(), CreatedMs: t.CreatedMs, Internal: t.Internal}
	s.RetentionMs, s.RetentionBytes = b.EffectiveRetention(t)
	total, per := b.TopicBytes(t)
	s.Bytes = total
	queues := make([]QueueInfo, t.QueueCount())
	for i := range t.Queues {
		q := QueueInfo{Queue: int32(i), Bytes: per[i]}
		if start, hw, _, err := b.Offsets(t.Name, int32(i)); err == nil {
			q.Start, q.End = int64(start), int64(hw)
			s.Messages += max(0, q.End-q.Start)
		}
		queues[i] = q
	}
	return s, queues
}

func registerTopicAPI(mux *http.ServeMux, b *broker.Broker, sec Security) {
	mux.HandleFunc("GET /api/v1/topics", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		out := []TopicSummary{}
		for _, t := range b.Topics(r.URL.Query().Get("internal") == "true") {
			s, _ := topicSummary(b, t)
			out = append(out, s)
		}
		writeJSON(w, out)
	}))
	mux.HandleFunc("GET /api/v1/topics/{topic}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		t, ok := topicParam(w, r, b)
		if !ok {
			return
		}
		s, queues := topicSummary(b, t)
		writeJSON(w, TopicDetail{TopicSummary: s, QueueList: queues, Config: t.Config})
	}))
	mux.HandleFunc("POST /api/v1/topics", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		var req topicCreate
		if !readJSON(w, r, &req) {
			return
		}
		name, err := model.ParseTopicName(req.Name)
		if err != nil {
			writeErr(w, err)
			return
		}
		if req.Queues == 0 {
			req.Queues = b.DefaultQueues()
		}
		t, err := b.CreateTopic(r.Context(), name, req.Queues, req.Config)
		if err != nil {
			writeErr(w, err)
			return
		}
		s, queues := topicSummary(b, t)
		writeJSONStatus(w, http.StatusCreated, TopicDetail{TopicSummary: s, QueueList: queues, Config: t.Config})
	}))
	mux.HandleFunc("DELETE /api/v1/topics/{topic}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		t, ok := topicParam(w, r, b)
		if !ok {
			return
		}
		if t.Internal {
			apiError(w, http.StatusForbidden, "internal_topic", t.FullName+" is internal to the broker")
			return
		}
		if err := b.DeleteTopic(r.Context(), t.Name); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}
