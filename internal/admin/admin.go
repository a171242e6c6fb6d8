// Package admin is Rosetta's HTTP plane: Prometheus metrics, health checks,
// pprof and (later) the REST API and web console. It reads the broker; it
// never touches storage directly or speaks a messaging protocol.
package admin

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rosettamq/rosetta/internal/admin/console"
	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
)

// Metrics are the collectors that other components feed directly.
type Metrics struct {
	// Registry holds the collectors; a term's Metrics (Term) holds only
	// those of its broker, and /metrics gathers the node's too.
	Registry     *prometheus.Registry
	node         *prometheus.Registry
	FsyncSeconds prometheus.Histogram
	// ColdReadSeconds: reads of record chunks from the object store.
	ColdReadSeconds prometheus.Histogram
	// RequestSeconds times each request a front-end handles, by protocol and
	// request (Kafka API name, RocketMQ request code); its _count is the
	// request counter.
	RequestSeconds *prometheus.HistogramVec
	terms          *termSet // the brokers' registries while their terms last
}

// Term returns metrics for one broker a cluster member builds while it
// leads a replication group: its own registry for the broker's collectors
// (served by every /metrics of the node until Release, labelled group=g
// replication_group=g when the cluster has several groups: group is then
// g, else empty) and
// the node's histograms.
func (m *Metrics) Term(group string) *Metrics {
	t := &Metrics{Registry: prometheus.NewRegistry(), node: m.Registry, FsyncSeconds: m.FsyncSeconds, ColdReadSeconds: m.ColdReadSeconds, RequestSeconds: m.RequestSeconds,
		terms: m.terms}
	m.terms.add(t.Registry, group)
	return t
}

// Release stops serving a term's metrics (its term ended).
func (m *Metrics) Release() { m.terms.remove(m.Registry) }

// gatherer is what /metrics serves: the node's metrics and those of the
// brokers it runs.
func (m *Metrics) gatherer() prometheus.Gatherer {
	node := m.Registry
	if m.node != nil {
		node = m.node
	}
	return prometheus.Gatherers{node, m.terms}
}

// ObserveRequest records one handled request.
func (m *Metrics) ObserveRequest(proto, request string, took time.Duration) {
	m.RequestSeconds.WithLabelValues(proto, request).Observe(took.Seconds())
}

// RequestObserver returns ObserveRequest for one protocol, keeping each
// request's histogram once looked up (a front-end's hot path then skips
// the label hashing).
func (m *Metrics) RequestObserver(proto string) func(request string, took time.Duration) {
	var cache sync.Map // request → prometheus.Observer
	return func(request string, took time.Duration) {
		o, ok := cache.Load(request)
		if !ok {
			o, _ = cache.LoadOrStore(request, m.RequestSeconds.WithLabelValues(proto, request))
		}
		o.(prometheus.Observer).Observe(took.Seconds())
	}
}

// NewMetrics creates a registry with Go and process collectors and the
// histograms components observe into.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: reg,
		terms:    &termSet{},
		FsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "rosetta", Subsystem: "storage", Name: "fsync_seconds",
			Help:    "Time taken by each commit-log fsync.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
	}
	m.ColdReadSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "rosetta", Subsystem: "tier", Name: "cold_read_seconds",
		Help:    "Time taken by each ranged read of records from the object store.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	m.RequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "rosetta", Subsystem: "requests", Name: "seconds",
		Help:    "Time taken to handle each request, by protocol and request (long polls included).",
		Buckets: prometheus.ExponentialBuckets(0.00002, 4, 12),
	}, []string{"proto", "request"})
	reg.MustRegister(m.FsyncSeconds, m.ColdReadSeconds, m.RequestSeconds)
	return m
}

// Handler returns the admin HTTP handler for b, the Kafka transaction
// coordinator (nil: none) and the security state; cluster answers GET
// /api/v1/cluster.
func Handler(b *broker.Broker, txns *txn.Coordinator, m *Metrics, log *slog.Logger, sec Security, cluster ClusterOps, members *Members, hist *History) http.Handler {
	m.Registry.MustRegister(newStorageCollector(b), newFlowCollector(b), newTierCollector(b))
	registerTxnMetrics(m.Registry, b)
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rosetta", Subsystem: "trace", Name: "events_recorded_total",
			Help: "Message lifecycle events recorded (topics with message trace on)."}, func() float64 { return float64(b.TraceStats().Recorded) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rosetta", Subsystem: "trace", Name: "events_dropped_total",
			Help: "Message lifecycle events dropped because the recorder was behind."}, func() float64 { return float64(b.TraceStats().Dropped) }))
	if sec.Quotas != nil {
		m.Registry.MustRegister(newQuotaCollector(sec.Quotas))
	}
	mux := http.NewServeMux()
	sec.register(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.gatherer(), promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		u, err := b.Engine().DiskUsage()
		status := map[string]any{"status": "ok", "disk_full": u.Full, "free_bytes": u.Free}
		if err != nil {
			status["status"] = "degraded"
			status["error"] = err.Error()
		} else if u.Full {
			status["status"] = "read-only"
		}
		if ts := b.Engine().TierStatus(); ts.Enabled {
			tier := map[string]any{"status": "ok", "pending_segments": ts.PendingSegments, "pending_bytes": ts.PendingBytes}
			if ts.LastError != "" {
				tier["status"] = "stalled"
				tier["error"] = ts.LastError
				tier["since"] = ts.LastErrorAt
			}
			status["tier"] = tier
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status)
	})
	cluster.register(mux, sec)
	registerTopicAPI(mux, b, sec, hist)
	registerGroupAPI(mux, b, sec, members, hist)
	registerTraceAPI(mux, b, sec)
	registerTierAPI(mux, b, sec)
	registerMessageAPI(mux, b, sec)
	registerDeadLetterAPI(mux, b, sec)
	registerTransactionAPI(mux, b, txns, sec)
	mux.HandleFunc("GET /api/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, openAPI()) })
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "not_found", "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	// The web console: a client of this API, guarded like it.
	page, assets := console.Handler()
	mux.Handle("GET /{$}", sec.guard(page.ServeHTTP))
	mux.Handle("GET /assets/", sec.guard(assets.ServeHTTP))
	mux.HandleFunc("GET /api/v1/storage", sec.guard(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(storageReport(b))
	}))
	// Run a garbage-collection pass now: segments less live than threshold
	// (default 0.5) are relocated and deleted.
	mux.HandleFunc("POST /api/v1/storage/gc", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		threshold := 0.5
		if v := r.URL.Query().Get("threshold"); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 || f > 1 {
				httpError(w, "threshold must be in (0, 1]", http.StatusBadRequest)
				return
			}
			threshold = f
		}
		res, err := b.Engine().GC(r.Context(), threshold)
		if err != nil {
			httpError(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}))
	// Clean every compacted topic now, due or not.
	mux.HandleFunc("POST /api/v1/storage/compact", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		res, err := b.RunCompaction(r.Context(), true)
		if err != nil {
			httpError(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}))
	// Run a retention pass now: topic retention, then segment reclamation.
	mux.HandleFunc("POST /api/v1/storage/retention", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		res, err := b.RunRetention(r.Context())
		if err != nil {
			httpError(w, err.Error(), http.StatusInternalServerError)
			return
		}
		log.Info("retention pass run through the admin API", "deleted_segments", res.DeletedSegments, "freed_bytes", res.FreedBytes)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}))
	// Pending timer and delayed messages, the earliest first:
	// GET /api/v1/timers?topic=<topic>&limit=<n>.
	mux.HandleFunc("GET /api/v1/timers", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		topic := r.URL.Query().Get("topic")
		if topic != "" {
			name, err := model.ParseTopicName(topic)
			if err != nil {
				writeErr(w, err)
				return
			}
			topic = name.String()
		}
		limit, ok := intParam(r, "limit", 100)
		if !ok || limit < 1 || limit > 1000 {
			apiError(w, http.StatusBadRequest, "bad_request", "limit: 1..1000")
			return
		}
		list, more, err := b.PendingTimers(r.Context(), topic, broker.TimerListLimits{Max: int(limit)})
		if err != nil {
			writeErr(w, err)
			return
		}
		out := apiv1.PendingTimers{Timers: []apiv1.PendingTimer{}, More: more}
		for _, p := range list {
			q := apiQueueNamed(b, p.Topic, p.Queue)
			if name, err := model.ParseTopicName(p.Topic); err == nil {
				p.Topic = name.Short()
			}
			out.Timers = append(out.Timers, apiv1.PendingTimer{ID: p.ID, Topic: p.Topic, Queue: q,
				Due: p.Due.UTC().Format("2006-01-02T15:04:05.000Z07:00"), DueMillis: p.Due.UnixMilli(), DelayLevel: p.DelayLevel,
				Tags: p.Tags, Keys: p.Keys, Size: p.Size, Offset: int64(p.Offset)})
		}
		writeJSON(w, out)
	}))
	// Cancel a pending timer (or delayed) message by its unique id:
	// DELETE /api/v1/timers/{id}?topic=<topic>.
	mux.HandleFunc("DELETE /api/v1/timers/{id}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		name, err := model.ParseTopicName(r.URL.Query().Get("topic"))
		if err == nil {
			err = b.RecallTimer(r.Context(), name, r.PathValue("id"), 0)
		}
		switch {
		case errors.Is(err, broker.ErrTimerNotPending) || errors.Is(err, model.ErrInvalidTopic):
			httpError(w, err.Error(), http.StatusNotFound)
		case err != nil:
			httpError(w, err.Error(), http.StatusInternalServerError)
		default:
			log.Info("timer message cancelled", "topic", name.String(), "id", r.PathValue("id"))
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	// Profiles can reveal what a node holds: guarded like the API.
	mux.HandleFunc("/debug/pprof/", sec.guard(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", sec.guard(pprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", sec.guard(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", sec.guard(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", sec.guard(pprof.Trace))
	return mux
}

// storageCollector reads the engine's counters at scrape time.
type storageCollector struct {
	b          *broker.Broker
	descs      map[string]*prometheus.Desc
	topicBytes *prometheus.Desc
}

func newStorageCollector(b *broker.Broker) *storageCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("rosetta_storage_"+name, help, nil, nil)
	}
	return &storageCollector{b: b, topicBytes: prometheus.NewDesc("rosetta_topic_bytes", "Bytes of a topic's retained records in the commit log.", []string{"topic"}, nil),
		descs: map[string]*prometheus.Desc{
			"records":    d("appended_records_total", "Records appended to the commit log."),
			"messages":   d("appended_messages_total", "Messages appended (a batch record holds several)."),
			"bytes":      d("appended_bytes_total", "Payload bytes appended."),
			"read_recs":  d("read_records_total", "Records read."),
			"read_bytes": d("read_bytes_total", "Record bytes read."),
			"refused":    d("disk_full_refusals_total", "Appends refused by the disk guard."),
			"ckpts":      d("checkpoints_total", "Checkpoints written."),
			"deleted":    d("deleted_segments_total", "Segments deleted by retention and garbage collection."),
			"gc_copied":  d("gc_copied_bytes_total", "Bytes of live records relocated by garbage collection."),
			"segments":   d("segments", "Commit-log segment files."),
			"log_bytes":  d("log_bytes", "Bytes held in the commit log."),
			"live_bytes": d("live_bytes", "Commit-log bytes of records some queue still retains (the rest is reclaimable)."),
			"queues":     d("queues", "Queues in the engine."),
			"idx_files":  d("open_index_files", "Queue index files open."),
			"disk_free":  d("disk_free_bytes", "Free bytes on the data disk."),
			"disk_total": d("disk_total_bytes", "Size of the data disk."),
			"disk_full":  d("disk_full", "1 while writes are refused for lack of disk space."),
		}}
}

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.topicBytes
}

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.b.Engine()
	s := e.Stats()
	counter := func(k string, v int64) {
		ch <- prometheus.MustNewConstMetric(c.descs[k], prometheus.CounterValue, float64(v))
	}
	gauge := func(k string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[k], prometheus.GaugeValue, v)
	}
	counter("records", s.AppendedRecords.Load())
	counter("messages", s.AppendedMessages.Load())
	counter("bytes", s.AppendedBytes.Load())
	counter("read_recs", s.ReadRecords.Load())
	counter("read_bytes", s.ReadBytes.Load())
	counter("refused", s.RefusedDiskFull.Load())
	counter("ckpts", s.Checkpoints.Load())
	counter("deleted", s.DeletedSegments.Load())
	counter("gc_copied", s.GCCopiedBytes.Load())
	ls := e.LogStats()
	gauge("segments", float64(ls.Segments))
	gauge("log_bytes", float64(ls.Bytes))
	var live int64
	for _, u := range e.Usage() {
		live += u.Live
	}
	gauge("live_bytes", float64(live))
	for _, t := range c.b.Topics(true) {
		total, _ := c.b.TopicBytes(t)
		ch <- prometheus.MustNewConstMetric(c.topicBytes, prometheus.GaugeValue, float64(total), t.FullName)
	}
	gauge("queues", float64(e.QueueCount()))
	gauge("idx_files", float64(ls.OpenIndexFiles))
	if u, err := e.DiskUsage(); err == nil {
		gauge("disk_free", float64(u.Free))
		gauge("disk_total", float64(u.Total))
		full := 0.0
		if u.Full {
			full = 1
		}
		gauge("disk_full", full)
	}
}

// registerTxnMetrics exposes RocketMQ transactional message counts.
func registerTxnMetrics(reg *prometheus.Registry, b *broker.Broker) {
	name := func(n string) string { return "rosetta_rocketmq_transactions_" + n }
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name("pending"), Help: "Half messages waiting for their producer's decision."},
			func() float64 { return float64(b.TxnStats().Pending) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name("committed_total"), Help: "Half messages committed since start."},
			func() float64 { return float64(b.TxnStats().Committed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name("rolled_back_total"), Help: "Half messages rolled back since start."},
			func() float64 { return float64(b.TxnStats().RolledBack) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name("checks_total"), Help: "Check-back requests made since start."},
			func() float64 { return float64(b.TxnStats().Checks) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name("discarded_total"), Help: "Half messages moved to TRANS_CHECK_MAX_TIME_TOPIC after the maximum checks."},
			func() float64 { return float64(b.TxnStats().Discarded) }),
	)
}

// RegisterPopMetrics exposes POP consumption per group (Kafka share groups
// included): messages in flight, redelivered, dead-lettered and archived.
func RegisterPopMetrics(reg *prometheus.Registry, e *pop.Engine) {
	reg.MustRegister(&popCollector{e: e,
		inFlight:     prometheus.NewDesc("rosetta_pop_in_flight", "Messages handed out by POP (or acquired by share group members) and not acknowledged yet.", []string{"group"}, nil),
		redelivered:  prometheus.NewDesc("rosetta_pop_redelivered_total", "Messages handed out again after their invisible time (or acquisition lock), since start.", []string{"group"}, nil),
		deadLettered: prometheus.NewDesc("rosetta_pop_dead_lettered_total", "Messages moved to the group's dead-letter topic, since start.", []string{"group"}, nil),
		archived:     prometheus.NewDesc("rosetta_pop_archived_total", "Share group records archived at the delivery count limit, since start.", []string{"group"}, nil)})
}

type popCollector struct {
	e                                             *pop.Engine
	inFlight, redelivered, deadLettered, archived *prometheus.Desc
}

func (c *popCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.redelivered
	ch <- c.deadLettered
	ch <- c.archived
}

func (c *popCollector) Collect(ch chan<- prometheus.Metric) {
	for g, st := range c.e.Stats() {
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.InFlight), g)
		ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.CounterValue, float64(st.Redelivered), g)
		ch <- prometheus.MustNewConstMetric(c.deadLettered, prometheus.CounterValue, float64(st.DeadLettered), g)
		ch <- prometheus.MustNewConstMetric(c.archived, prometheus.CounterValue, float64(st.Archived), g)
	}
}

// storageReport is the commit log's space by segment and by topic.
func storageReport(b *broker.Broker) map[string]any {
	e := b.Engine()
	ls := e.LogStats()
	type segment struct {
		Base       int64 `json:"base"`
		End        int64 `json:"end"`
		Bytes      int64 `json:"bytes"`
		Live       int64 `json:"live"`
		LastTimeMs int64 `json:"last_time_ms"`
		Sealed     bool  `json:"sealed"`
	}
	var segs []segment
	var live int64
	for _, u := range e.Usage() {
		segs = append(segs, segment{Base: int64(u.Base), End: int64(u.End), Bytes: int64(u.End - u.Base), Live: u.Live, LastTimeMs: u.LastTime, Sealed: u.Sealed})
		live += u.Live
	}
	topics := map[string]any{}
	for _, t := range b.Topics(true) {
		total, per := b.TopicBytes(t)
		numbers := make([]int32, len(per)) // each queue's topic-wide number
		for i := range numbers {
			numbers[i] = apiQueue(b, t, int32(i))
		}
		entry := map[string]any{"bytes": total, "queues": per, "queue_numbers": numbers}
		if t.Config.Compacted() {
			entry["cleaned_to"] = b.CompactionState(t)
		}
		topics[t.FullName] = entry
	}
	return map[string]any{"log_bytes": ls.Bytes, "live_bytes": live, "segments": segs, "topics": topics}
}
