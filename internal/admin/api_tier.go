package admin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
)

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
		segs := []apiv1.TierSegment{}
		for _, s := range e.TieredSegments() {
			segs = append(segs, apiv1.TierSegment{Key: s.Key, Term: uint64(s.Term), Base: int64(s.Base), End: int64(s.End),
				FirstIndex: uint64(s.FirstIndex), LastIndex: uint64(s.LastIndex), Bytes: s.Size, Queues: len(s.Queues), Local: local[int64(s.Base)]})
		}
		// The engine's status has the API's fields, in order (a change to
		// one without the other does not compile).
		writeJSON(w, apiv1.TierReport{Status: apiv1.TierStatus(e.TierStatus()), Segments: segs})
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

// tierCollector exports tiering's state (nothing when tiering is off).
type tierCollector struct {
	b     *broker.Broker
	descs map[string]*prometheus.Desc
}

func newTierCollector(b *broker.Broker) *tierCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("rosetta_tier_"+name, help, nil, nil)
	}
	return &tierCollector{b: b, descs: map[string]*prometheus.Desc{
		"segments":       d("segments", "Commit-log segments in the object store."),
		"bytes":          d("bytes", "Bytes of the tiered segments' objects."),
		"local":          d("local_segments", "Tiered segments still on local disk."),
		"pending":        d("pending_segments", "Sealed segments holding live records not tiered yet."),
		"pending_bytes":  d("pending_bytes", "Bytes of the sealed segments not tiered yet (the upload lag)."),
		"uploaded":       d("uploaded_segments_total", "Segments uploaded and committed."),
		"uploaded_bytes": d("uploaded_bytes_total", "Bytes uploaded."),
		"upload_errors":  d("upload_errors_total", "Upload passes that failed (retried with back-off)."),
		"stalled":        d("stalled", "1 while the last upload pass failed."),
		"cold_reads":     d("cold_reads_total", "Ranged reads of records from the object store."),
		"cold_bytes":     d("cold_read_bytes_total", "Bytes read from the object store."),
		"cache_hits":     d("cache_hits_total", "Reads of tiered records served from the cache."),
		"cache_misses":   d("cache_misses_total", "Reads of tiered records that waited for the object store."),
	}}
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.Engine().TierStatus()
	if !st.Enabled {
		return
	}
	put := func(k string, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[k], t, v)
	}
	stalled := 0.0
	if st.LastError != "" {
		stalled = 1
	}
	put("segments", prometheus.GaugeValue, float64(st.Segments))
	put("bytes", prometheus.GaugeValue, float64(st.Bytes))
	put("local", prometheus.GaugeValue, float64(st.LocalSegments))
	put("pending", prometheus.GaugeValue, float64(st.PendingSegments))
	put("pending_bytes", prometheus.GaugeValue, float64(st.PendingBytes))
	put("stalled", prometheus.GaugeValue, stalled)
	put("uploaded", prometheus.CounterValue, float64(st.UploadedSegments))
	put("uploaded_bytes", prometheus.CounterValue, float64(st.UploadedBytes))
	put("upload_errors", prometheus.CounterValue, float64(st.UploadErrors))
	put("cold_reads", prometheus.CounterValue, float64(st.ColdReads))
	put("cold_bytes", prometheus.CounterValue, float64(st.ColdReadBytes))
	put("cache_hits", prometheus.CounterValue, float64(st.CacheHits))
	put("cache_misses", prometheus.CounterValue, float64(st.CacheMisses))
}
