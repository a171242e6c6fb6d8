package admin

import (
	"net/http"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// registerTraceAPI serves recorded message lifecycles:
// GET /api/v1/trace?id=<message id> or ?topic=<topic>&queue=<n>&offset=<n>.
func registerTraceAPI(mux *http.ServeMux, b *broker.Broker, sec Security) {
	mux.HandleFunc("GET /api/v1/trace", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		id, topic := q.Get("id"), q.Get("topic")
		queue, ok1 := intParam(r, "queue", 0)
		offset, ok2 := intParam(r, "offset", -1)
		if !ok1 || !ok2 || id == "" && (topic == "" || offset < 0) {
			apiError(w, http.StatusBadRequest, "bad_request", "id=<message id>, or topic, queue and offset")
			return
		}
		if topic != "" {
			name, err := model.ParseTopicName(topic)
			if err != nil {
				writeErr(w, err)
				return
			}
			topic = name.Short()
			if t, err := b.Topic(name); err == nil {
				// Events name the broker's own queue index.
				if local, held, _ := localQueue(b, t, queue); held {
					queue = int64(local)
				} else {
					queue = -2 // another group's queue: none of its events are here
				}
			}
		}
		events, err := b.MessageTrace(id, topic, int32(queue), offset, 1000)
		if err != nil {
			writeErr(w, err)
			return
		}
		out := apiv1.MessageTrace{Events: []apiv1.TraceEvent{}}
		for _, e := range events {
			out.Events = append(out.Events, apiv1.TraceEvent{TimeMs: e.Time, Time: time.UnixMilli(e.Time).UTC().Format("2006-01-02T15:04:05.000Z07:00"),
				Kind: e.Kind, ID: e.ID, Topic: e.Topic, Queue: apiQueueNamed(b, e.Topic, e.Queue), Offset: e.Offset, Protocol: e.Protocol, Group: e.Group,
				Client: e.Client, Attempt: e.Attempt, Detail: e.Detail, Origin: e.Origin})
		}
		writeJSON(w, out)
	}))
}
