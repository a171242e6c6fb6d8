package admin

import (
	"encoding/hex"
	"fmt"
	"net/http"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// topicConfig is a topic's configuration as the API shows it.
func topicConfig(c broker.TopicConfig) apiv1.TopicConfig {
	return apiv1.TopicConfig{RetentionMs: c.RetentionMs, RetentionBytes: c.RetentionBytes, MaxMessageBytes: c.MaxMessageBytes,
		MessageType: c.MessageType, CleanupPolicy: c.CleanupPolicy, TimestampType: c.TimestampType, Extra: c.Extra,
		MessageTrace: c.MessageTrace == broker.TopicConfigMessageTrace, NoTiering: !c.Tiered(), ReplicationFactor: c.ReplicationFactor}
}

// brokerTopicConfig is an API topic configuration for the broker.
func brokerTopicConfig(c apiv1.TopicConfig) broker.TopicConfig {
	bc := broker.TopicConfig{RetentionMs: c.RetentionMs, RetentionBytes: c.RetentionBytes, MaxMessageBytes: c.MaxMessageBytes,
		MessageType: c.MessageType, CleanupPolicy: c.CleanupPolicy, TimestampType: c.TimestampType, Extra: c.Extra,
		ReplicationFactor: c.ReplicationFactor}
	if c.MessageTrace {
		bc.MessageTrace = broker.TopicConfigMessageTrace
	}
	if c.NoTiering {
		bc.RemoteStorage = "false"
	}
	return bc
}

// alterTopic applies a PATCH: settings given change, the queue count grows.
func alterTopic(r *http.Request, b *broker.Broker, t *broker.Topic, req apiv1.TopicAlter) (*broker.Topic, error) {
	c := t.Config
	if req.RetentionMs != nil {
		c.RetentionMs = *req.RetentionMs
	}
	if req.RetentionBytes != nil {
		c.RetentionBytes = *req.RetentionBytes
	}
	if req.MaxMessageBytes != nil {
		c.MaxMessageBytes = *req.MaxMessageBytes
	}
	if req.MessageType != nil {
		c.MessageType = *req.MessageType
	}
	if req.CleanupPolicy != nil {
		c.CleanupPolicy = *req.CleanupPolicy
	}
	if req.MessageTrace != nil {
		c.MessageTrace = "false"
		if *req.MessageTrace {
			c.MessageTrace = broker.TopicConfigMessageTrace
		}
	}
	if req.NoTiering != nil {
		c.RemoteStorage = ""
		if *req.NoTiering {
			c.RemoteStorage = "false"
		}
	}
	if req.Queues != 0 && req.Queues < len(t.All) {
		return nil, fmt.Errorf("%w: %s has %d queues; a topic only grows", model.ErrInvalidQueueCount, t.Name.Short(), len(t.All))
	}
	nt, err := b.UpdateTopicConfig(r.Context(), t.Name, c)
	if err != nil {
		return nil, err
	}
	if req.Queues > len(nt.All) {
		return b.GrowWholeTopic(r.Context(), t.Name, req.Queues)
	}
	return nt, nil
}

// createTopic makes a topic of n queues over every replication group (0:
// the broker's default number in each).
func createTopic(r *http.Request, b *broker.Broker, name model.TopicName, n int, cfg broker.TopicConfig) (*broker.Topic, error) {
	if n == 0 {
		n = b.DefaultQueues() * max(len(b.Placement().NewQueues(cfg.ReplicationFactor)), 1)
	}
	return b.CreateWholeTopic(r.Context(), name, n, cfg)
}

func topicSummary(b *broker.Broker, t *broker.Topic) (apiv1.TopicSummary, []apiv1.QueueInfo) {
	s := apiv1.TopicSummary{Name: t.Name.Short(), FullName: t.FullName, ID: hex.EncodeToString(t.ID[:]), Queues: t.QueueCount(), CreatedMs: t.CreatedMs, Internal: t.Internal}
	s.RetentionMs, s.RetentionBytes = b.EffectiveRetention(t)
	total, per := b.TopicBytes(t)
	s.Bytes = total
	// A moved queue is listed by every group holding a piece of it, each
	// with its piece's offsets and the group it is in now
	// (mergeMovedQueues).
	queues := make([]apiv1.QueueInfo, 0, len(t.Queues)+len(t.Guests))
	for i := range len(t.Queues) + len(t.Guests) {
		q := apiv1.QueueInfo{Queue: apiQueue(b, t, int32(i)), Group: int(b.Placement().Group)}
		if i < len(per) {
			q.Bytes = per[i]
		} else if id, ok := t.Queue(int32(i)); ok {
			q.Bytes, _ = b.Engine().QueueBytes(id)
		}
		if t.Away(int32(i)) {
			q.Group = int(t.GroupOf(int(q.Queue)))
		}
		if start, hw, _, err := b.Offsets(t.Name, int32(i)); err == nil {
			q.Start, q.End = int64(start), int64(hw)
			s.Messages += max(0, q.End-q.Start)
		}
		queues = append(queues, q)
	}
	return s, queues
}

// localStarts sets, when the node tiers, each queue's first offset on local
// disk (below it the records are in the bucket only).
func localStarts(b *broker.Broker, t *broker.Topic, queues []apiv1.QueueInfo) {
	e := b.Engine()
	if !e.Tiered() {
		return
	}
	ends := e.BucketOnlyEnds()
	for i, id := range t.Queues {
		if i < len(queues) {
			queues[i].LocalStart = max(queues[i].Start, int64(ends[id]))
		}
	}
}

func registerTopicAPI(mux *http.ServeMux, b *broker.Broker, sec Security, hist *History) {
	mux.HandleFunc("GET /api/v1/topics", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		out := []apiv1.TopicSummary{}
		for _, t := range b.Topics(r.URL.Query().Get("internal") == "true") {
			s, _ := topicSummary(b, t)
			s.MessagesPerSec = hist.TopicRate(t.FullName)
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
		localStarts(b, t, queues)
		writeJSON(w, apiv1.TopicDetail{TopicSummary: s, QueueList: queues, Config: topicConfig(t.Config)})
	}))
	mux.HandleFunc("POST /api/v1/topics", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.TopicCreate
		if !readJSON(w, r, &req) {
			return
		}
		name, err := model.ParseTopicName(req.Name)
		if err != nil {
			writeErr(w, err)
			return
		}
		t, err := createTopic(r, b, name, req.Queues, brokerTopicConfig(req.Config))
		if err != nil {
			writeErr(w, err)
			return
		}
		s, queues := topicSummary(b, t)
		writeJSONStatus(w, http.StatusCreated, apiv1.TopicDetail{TopicSummary: s, QueueList: queues, Config: topicConfig(t.Config)})
	}))
	mux.HandleFunc("PATCH /api/v1/topics/{topic}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		t, ok := topicParam(w, r, b)
		if !ok {
			return
		}
		var req apiv1.TopicAlter
		if !readJSON(w, r, &req) {
			return
		}
		nt, err := alterTopic(r, b, t, req)
		if err != nil {
			writeErr(w, err)
			return
		}
		s, queues := topicSummary(b, nt)
		writeJSON(w, apiv1.TopicDetail{TopicSummary: s, QueueList: queues, Config: topicConfig(nt.Config)})
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
