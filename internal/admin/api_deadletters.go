package admin

import (
	"net/http"
	"sort"
	"strings"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

const dlqPrefix = "%DLQ%"

func registerDeadLetterAPI(mux *http.ServeMux, b *broker.Broker, sec Security) {
	mux.HandleFunc("GET /api/v1/deadletters", sec.guard(func(w http.ResponseWriter, _ *http.Request) {
		out := []apiv1.DeadLetterSummary{}
		for _, t := range b.Topics(false) {
			short := t.Name.Short()
			if !strings.HasPrefix(short, dlqPrefix) {
				continue
			}
			s, queues := topicSummary(b, t)
			d := apiv1.DeadLetterSummary{Group: strings.TrimPrefix(short, dlqPrefix), Topic: short, Messages: s.Messages, Bytes: s.Bytes}
			if len(queues) > 0 {
				d.Start, d.End = queues[0].Start, queues[0].End
			}
			out = append(out, d)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
		writeJSON(w, out)
	}))
	// Browse a group's dead letters: the topic browser on %DLQ%<group>.
	mux.HandleFunc("GET /api/v1/deadletters/{group}/messages", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		r.SetPathValue("topic", dlqPrefix+r.PathValue("group"))
		browseQueue(w, r, b)
	}))
	mux.HandleFunc("POST /api/v1/deadletters/{group}/redrive", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.Redrive
		if !readJSON(w, r, &req) {
			return
		}
		opts := broker.RedriveOptions{From: model.QueueOffset(req.From), To: model.QueueOffset(req.To), Max: req.Max, ToRetry: req.ToRetry}
		for _, o := range req.Offsets {
			opts.Offsets = append(opts.Offsets, model.QueueOffset(o))
		}
		res, err := b.RedriveDeadLetters(r.Context(), r.PathValue("group"), opts)
		if err != nil {
			writeErr(w, err)
			return
		}
		out := apiv1.RedriveResult{Redriven: res.Redriven, Next: int64(res.Next)}
		for _, o := range res.Skipped {
			out.Skipped = append(out.Skipped, int64(o))
		}
		writeJSON(w, out)
	}))
}
