package admin

import (
	"net/http"

	"github.com/rosettamq/rosetta/internal/broker"
)

// tierSegment is one tiered segment as the API shows it.
type tierSegment struct {
	Key        string `json:"key"`
	Term       uint64 `json:"term"`
	Base       int64  `json:"base"`
	End        int64  `json:"end"`
	FirstIndex uint64 `json:"first_index"`
	LastIndex  uint64 `json:"last_index"`
	Bytes      int64  `json:"bytes"`
	Queues     int    `json:"queues"`
	Local      bool   `json:"local"` // its file is still on local disk
}

// registerTierAPI serves tiered storage's state (GET /api/v1/storage/tier:
// totals, the upload lag, cold reads, the last upload error and every tiered
// segment) and an upload pass on demand (POST /api/v1/storage/tier/upload).
func registerTierAPI(mux *http.ServeMux, b *broker.Broker, sec Security) {
	mux.HandleFunc("GET /api/v1/storage/tier", sec.guard(func(w http.ResponseWriter, _ *http.Request) {
		e := b.Engine()
		local := map[int64]bool{}
		for _, u := range e.Usage() {
			local[int64(u.Base)] = true
		}
		segs := []tierSegment{}
		for _, s := range e.TieredSegments() {
			segs = append(segs, tierSegment{Key: s.Key, Term: uint64(s.Term), Base: int64(s.Base), End: int64(s.End),
				FirstIndex: uint64(s.FirstIndex), LastIndex: uint64(s.LastIndex), Bytes: s.Size, Queues: len(s.Queues), Local: local[int64(s.Base)]})
		}
		writeJSON(w, map[string]any{"status": e.TierStatus(), "segments": segs})
	}))
	mux.HandleFunc("POST /api/v1/storage/tier/upload", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		n, err := b.Engine().UploadSealed(r.Context())
		if err != nil {
			httpError(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, map[string]any{"uploaded_segments": n})
	}))
}
