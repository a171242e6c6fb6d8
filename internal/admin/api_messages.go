package admin

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// sendMessage makes the message of a send and picks its queue (the
// broker's own index).
func sendMessage(b *broker.Broker, s apiv1.MessageSend, t *broker.Topic) (model.Message, int32, error) {
	m := model.Message{Key: []byte(s.Key), Tags: s.Tags}
	switch s.BodyEncoding {
	case "", "text":
		m.Body = []byte(s.Body)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(s.Body)
		if err != nil {
			return m, 0, fmt.Errorf("body: %w", err)
		}
		m.Body = b
	default:
		return m, 0, fmt.Errorf("body_encoding must be text or base64")
	}
	for _, h := range s.Headers {
		m.Headers = append(m.Headers, model.Header{Key: h.Key, Value: []byte(h.Value)})
	}
	// A message that will wait (a timer or delay level) gets a unique id,
	// as RocketMQ producers give every message: what cancelling it names.
	_, delayed := m.Header(broker.HeaderDelayLevel)
	_, timer, _ := broker.TimerDeliverAt(&m, time.Now())
	if _, ok := m.Header(broker.HeaderUniqKey); !ok && (delayed || timer) {
		var id [16]byte
		_, _ = rand.Read(id[:])
		m.Headers = append(m.Headers, model.Header{Key: broker.HeaderUniqKey, Value: []byte(strings.ToUpper(hex.EncodeToString(id[:])))})
	}
	if id, _ := m.Header(broker.HeaderUniqKey); len(id) > 0 {
		m.IndexKeys = append(m.IndexKeys, string(id))
	}
	var q int32
	switch {
	case s.Queue != nil:
		local, held, _ := localQueue(b, t, int64(*s.Queue))
		if !held {
			return m, 0, fmt.Errorf("%s has no queue %d", t.Name.Short(), *s.Queue)
		}
		q = local
	case s.Key != "":
		h := fnv.New32a()
		h.Write(m.Key)
		q = int32(h.Sum32() % uint32(t.QueueCount()))
	}
	return m, q, nil
}

func messageView(t *broker.Topic, q int32, sm *broker.StoredMessage) apiv1.MessageView {
	m := &sm.Message
	v := apiv1.MessageView{Topic: t.Name.Short(), Queue: q, Offset: int64(sm.Offset), StoreTimeMs: sm.StoreTime, BornTimeMs: m.BornTime,
		Tags: m.Tags, BodyBytes: len(m.Body), Compressed: m.Flags&model.FlagCompressedBody != 0}
	if len(m.Key) > 0 {
		v.Key, _ = encodeBytes(m.Key)
	}
	v.Body, v.BodyEncoding = encodeBytes(m.Body)
	if strings.HasPrefix(v.Topic, dlqPrefix) {
		v.Origin = broker.DeadLetterOrigin(m)
	}
	for _, h := range m.Headers {
		val, _ := encodeBytes(h.Value)
		v.Headers = append(v.Headers, apiv1.HeaderView{Key: h.Key, Value: val})
	}
	return v
}

// encodeBytes shows bytes as text when they are, else in base64.
func encodeBytes(b []byte) (string, string) {
	if isText(b) {
		return string(b), "text"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// intParam reads an integer query parameter (def when absent).
func intParam(r *http.Request, name string, def int64) (int64, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

func registerMessageAPI(mux *http.ServeMux, b *broker.Broker, sec Security) {
	// Browse a queue: from an offset, a time, the oldest or the newest
	// messages, a page at a time.
	mux.HandleFunc("GET /api/v1/topics/{topic}/messages", sec.guard(func(w http.ResponseWriter, r *http.Request) { browseQueue(w, r, b) }))
	// Produce a message (a test message, a hand-made fix): it is stored as
	// any protocol's message, read by every kind of consumer.
	mux.HandleFunc("POST /api/v1/topics/{topic}/messages", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		t, ok := topicParam(w, r, b)
		if !ok {
			return
		}
		var req apiv1.MessageSend
		if !readJSON(w, r, &req) {
			return
		}
		m, q, err := sendMessage(b, req, t)
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		// Published as a producer's message: timer and delay-level
		// headers make it wait, as they would from a RocketMQ client.
		pub, err := b.Publish(broker.WithTraceSource(r.Context(), "admin", r.RemoteAddr), t, q, []model.Message{m})
		if errors.Is(err, broker.ErrTimerIllegal) {
			apiError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		sent := apiv1.MessageSent{Topic: t.Name.Short(), Queue: apiQueue(b, t, q), Offset: int64(pub.Offsets[0])}
		if id, ok := m.Header(broker.HeaderUniqKey); ok {
			sent.ID = string(id)
		}
		switch pub.Kind {
		case broker.PublishedTimer, broker.PublishedDelayed:
			sent.Pending, sent.Offset, sent.DueMs = "timer", -1, pub.Due
		case broker.PublishedHalf:
			sent.Pending, sent.Offset = "transaction", -1
		}
		writeJSONStatus(w, http.StatusCreated, sent)
	}))
	// Find messages by key: RocketMQ KEYS and message ids (UNIQ_KEY), and
	// the keys of Kafka records the broker indexes (compacted topics).
	mux.HandleFunc("GET /api/v1/messages", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		limit, ok := intParam(r, "limit", 32)
		if key == "" || !ok || limit <= 0 || limit > 500 {
			apiError(w, http.StatusBadRequest, "bad_request", "key is required; limit must be 1..500")
			return
		}
		var only *model.TopicName
		if s := r.URL.Query().Get("topic"); s != "" {
			name, err := model.ParseTopicName(s)
			if err != nil {
				writeErr(w, err)
				return
			}
			only = &name
		}
		out := []apiv1.MessageView{}
		for _, h := range b.LookupKey([]byte(key), int(limit)*4, 0, 0) {
			ref, err := b.QueueByID(h.Queue)
			if err != nil || only != nil && ref.Topic.Name != *only {
				continue
			}
			_, _ = b.EachMessage(h.Queue, h.Offset, 1, func(sm *broker.StoredMessage) bool {
				if sm.Offset == h.Offset && hasKey(&sm.Message, key) {
					out = append(out, messageView(ref.Topic, apiQueue(b, ref.Topic, ref.Index), sm))
				}
				return false
			})
			if len(out) >= int(limit) {
				break
			}
		}
		writeJSON(w, out)
	}))
}

// hasKey reports whether m carries key: as its key, among its
// space-separated KEYS, or as its RocketMQ message id.
func hasKey(m *model.Message, key string) bool {
	if string(m.Key) == key || slices.Contains(strings.Fields(string(m.Key)), key) {
		return true
	}
	v, ok := m.Header("UNIQ_KEY")
	return ok && string(v) == key
}

// browseQueue answers a page of a queue's messages (GET …/messages).
func browseQueue(w http.ResponseWriter, r *http.Request, b *broker.Broker) {
	t, ok := topicParam(w, r, b)
	if !ok {
		return
	}
	q, ok1 := intParam(r, "queue", 0)
	limit, ok2 := intParam(r, "limit", 20)
	if !ok1 || !ok2 || limit <= 0 || limit > 500 {
		apiError(w, http.StatusBadRequest, "bad_request", "queue and limit (1..500) must be integers")
		return
	}
	local, held, _ := localQueue(b, t, q)
	if !held {
		apiError(w, http.StatusNotFound, "queue_not_found", t.FullName+" has no queue "+strconv.FormatInt(q, 10))
		return
	}
	start, hw, _, err := b.Offsets(t.Name, local)
	if err != nil {
		writeErr(w, err)
		return
	}
	from := start
	query := r.URL.Query()
	switch {
	case query.Has("offset"):
		off, ok := intParam(r, "offset", 0)
		if !ok {
			apiError(w, http.StatusBadRequest, "bad_request", "offset must be an integer")
			return
		}
		from = model.QueueOffset(off)
	case query.Has("time_ms"):
		ts, ok := intParam(r, "time_ms", 0)
		if !ok {
			apiError(w, http.StatusBadRequest, "bad_request", "time_ms must be an integer")
			return
		}
		if from, _, err = b.OffsetForTime(t.Name, local, ts); err != nil {
			from = hw
		}
	case query.Get("from") == "newest":
		from = hw - model.QueueOffset(limit)
	case query.Get("from") != "" && query.Get("from") != "oldest":
		apiError(w, http.StatusBadRequest, "bad_request", "from must be oldest or newest")
		return
	}
	from = min(max(from, start), hw)
	page := apiv1.MessagePage{Messages: []apiv1.MessageView{}, NextOffset: int64(from), End: int64(hw)}
	id := t.Queues[local]
	for next := from; len(page.Messages) < int(limit) && next < hw; {
		after, err := b.EachMessage(id, next, int(limit), func(sm *broker.StoredMessage) bool {
			page.Messages = append(page.Messages, messageView(t, int32(q), sm))
			return len(page.Messages) < int(limit)
		})
		if err != nil {
			writeErr(w, err)
			return
		}
		if after <= next {
			break
		}
		next = after
		page.NextOffset = int64(after)
	}
	writeJSON(w, page)
}
