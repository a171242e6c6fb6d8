package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// When a cluster spreads topics over several replication groups, each
// group's leader runs the admin API over its group's broker (its share of
// every topic, in topic-wide queue numbers), and the member leading group 0
// answers the API for the whole cluster: Spanning asks every group's
// handler and merges their answers, as one broker would have answered.

// GroupAsker reaches the admin handler of every replication group's
// leader.
type GroupAsker struct {
	// Groups is how many replication groups the cluster has now (groups
	// are added while it runs).
	Groups func() int
	// Ask sends a request to group g's handler (in this process, or at
	// the member leading the group) and returns its answer; an error
	// means the group could not answer (no leader, unreachable).
	Ask func(ctx context.Context, g int, req SubRequest) (SubAnswer, error)
}

// SubRequest is a request to one group's handler: the client's own, with
// the headers that authenticate it.
type SubRequest struct {
	Method string      `json:"m"`
	Target string      `json:"t"` // path and query
	Header http.Header `json:"h,omitempty"`
	Body   []byte      `json:"b,omitempty"`
}

// SubAnswer is one group handler's answer.
type SubAnswer struct {
	Status int    `json:"s"`
	Type   string `json:"c,omitempty"` // Content-Type
	Body   []byte `json:"b,omitempty"`
}

// Answer runs req on h and returns its answer.
func Answer(ctx context.Context, h http.Handler, req SubRequest, remoteAddr string) SubAnswer {
	r, err := http.NewRequestWithContext(ctx, req.Method, req.Target, bytes.NewReader(req.Body))
	if err != nil {
		return SubAnswer{Status: http.StatusBadRequest}
	}
	r.RemoteAddr = remoteAddr
	for k, v := range req.Header {
		r.Header[k] = v
	}
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return SubAnswer{Status: rec.status, Type: rec.header.Get("Content-Type"), Body: rec.body.Bytes()}
}

// recorder is an http.ResponseWriter that keeps the answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}

// forwarded are the client headers a group's handler sees.
var forwarded = []string{"Authorization", "Content-Type"}

// spanning is the cluster-wide admin API.
type spanning struct {
	local http.Handler // group 0's handler with the node's endpoints
	ask   GroupAsker
}

// Spanning returns the admin API of a cluster of several replication
// groups: the topic, message, consumer group, transaction, timer,
// dead-letter, trace and storage endpoints ask every group and merge; the rest
// (metrics, health, security, the console, the cluster's status) is
// local's.
func Spanning(local http.Handler, ask GroupAsker) http.Handler {
	s := &spanning{local: local, ask: ask}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/topics", s.topics)
	mux.HandleFunc("GET /api/v1/topics/{topic}", s.topic)
	mux.HandleFunc("POST /api/v1/topics", s.createTopic)
	mux.HandleFunc("PATCH /api/v1/topics/{topic}", s.alterTopic)
	mux.HandleFunc("GET /api/v1/topics/{topic}/messages", s.byQueue)
	mux.HandleFunc("POST /api/v1/topics/{topic}/messages", s.publish)
	mux.HandleFunc("GET /api/v1/messages", s.messages)
	mux.HandleFunc("GET /api/v1/groups", s.groups)
	mux.HandleFunc("GET /api/v1/groups/{group}", s.group)
	mux.HandleFunc("POST /api/v1/groups/{group}/reset", s.reset)
	mux.HandleFunc("DELETE /api/v1/groups/{group}", s.anyDone)
	mux.HandleFunc("GET /api/v1/transactions", s.transactions)
	mux.HandleFunc("POST /api/v1/transactions/kafka/{id}/abort", s.anyDone)
	mux.HandleFunc("POST /api/v1/transactions/rocketmq/{offset}/{action}", s.endHalf)
	mux.HandleFunc("GET /api/v1/timers", s.timers)
	mux.HandleFunc("DELETE /api/v1/timers/{id}", s.anyDone)
	mux.HandleFunc("GET /api/v1/deadletters", s.deadLetters)
	mux.HandleFunc("GET /api/v1/deadletters/{group}/messages", s.byQueue)
	mux.HandleFunc("POST /api/v1/deadletters/{group}/redrive", s.redrive)
	mux.HandleFunc("GET /api/v1/trace", s.trace)
	mux.HandleFunc("GET /api/v1/storage", s.storage)
	mux.HandleFunc("GET /api/v1/storage/tier", s.tier)
	mux.HandleFunc("POST /api/v1/storage/tier/upload", s.tierUpload)
	mux.HandleFunc("POST /api/v1/storage/{action}", s.everyGroup)
	mux.Handle("/", local)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ask.Groups() <= 1 {
			local.ServeHTTP(w, r) // one group answers for the cluster
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// sub is the request r (with body) as a group's handler takes it.
func sub(r *http.Request, body []byte) SubRequest {
	req := SubRequest{Method: r.Method, Target: r.URL.RequestURI(), Body: body, Header: http.Header{}}
	for _, k := range forwarded {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	return req
}

// body reads a request body of at most 1 MiB.
func body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "request body: "+err.Error())
		return nil, false
	}
	return b, true
}

// groupWait is how long a request waits for a group that cannot answer
// (its leader is being elected) before it answers 503.
const groupWait = 3 * time.Second

// askGroup asks group g, again while it cannot answer, for up to
// groupWait — reads only: a change may have been made by a call whose
// answer was lost.
func (s *spanning) askGroup(ctx context.Context, g int, req SubRequest) (SubAnswer, error) {
	deadline := time.Now().Add(groupWait)
	for {
		a, err := s.ask.Ask(ctx, g, req)
		if err == nil || req.Method != http.MethodGet || time.Now().After(deadline) {
			return a, err
		}
		select {
		case <-ctx.Done():
			return a, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// one asks group g; a group that cannot answer is a 503.
func (s *spanning) one(w http.ResponseWriter, r *http.Request, g int, req SubRequest) (SubAnswer, bool) {
	a, err := s.askGroup(r.Context(), g, req)
	if err != nil {
		apiError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("replication group %d: %v", g, err))
		return a, false
	}
	return a, true
}

// all asks every group at once.
func (s *spanning) all(w http.ResponseWriter, r *http.Request, req SubRequest) ([]SubAnswer, bool) {
	n := s.ask.Groups()
	out := make([]SubAnswer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { out[g], errs[g] = s.askGroup(r.Context(), g, req) })
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			apiError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("replication group %d: %v", g, err))
			return nil, false
		}
	}
	return out, true
}

// pass writes answer a as it is.
func pass(w http.ResponseWriter, a SubAnswer) {
	w.Header().Set("Content-Type", cmp.Or(a.Type, "application/json"))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// failed passes on the first failed answer (404s too unless notFoundOK)
// and reports whether there was one; with notFoundOK, all answers 404 is a
// 404.
func failed(w http.ResponseWriter, answers []SubAnswer, notFoundOK bool) bool {
	found := false
	for _, a := range answers {
		switch {
		case a.Status == http.StatusNotFound && notFoundOK:
		case a.Status >= 300:
			pass(w, a)
			return true
		default:
			found = true
		}
	}
	if !found && len(answers) > 0 {
		pass(w, answers[0])
		return true
	}
	return false
}

// decodeEach decodes the successful answers.
func decodeEach[T any](w http.ResponseWriter, answers []SubAnswer) ([]T, bool) {
	var out []T
	for g, a := range answers {
		if a.Status >= 300 {
			continue
		}
		var v T
		if err := json.Unmarshal(a.Body, &v); err != nil {
			apiError(w, http.StatusBadGateway, "internal", fmt.Sprintf("replication group %d answered: %v", g, err))
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

// gather asks every group, passes on a failure and decodes the rest.
func gather[T any](s *spanning, w http.ResponseWriter, r *http.Request, req SubRequest, notFoundOK bool) ([]T, bool) {
	answers, ok := s.all(w, r, req)
	if !ok || failed(w, answers, notFoundOK) {
		return nil, false
	}
	return decodeEach[T](w, answers)
}

// groupOfQueue is the group holding a topic-wide queue of the request's
// topic (from the query's queue parameter; group 0, which answers the
// error, when it is bad or the topic unknown): as the groups' shares of the
// topic say. A dead-letter queue (no topic in the path) has one queue per
// group, queue g in group g.
func (s *spanning) groupOfQueue(w http.ResponseWriter, r *http.Request, q string) (int, bool) {
	n, err := strconv.ParseInt(q, 10, 32)
	if err != nil || n < 0 {
		return 0, true
	}
	topic := r.PathValue("topic")
	if topic == "" {
		if int(n) < s.ask.Groups() {
			return int(n), true
		}
		return 0, true
	}
	d, _, ok := s.topicDetail(w, r, topic)
	if !ok {
		return 0, false
	}
	for _, qi := range d.QueueList {
		if int64(qi.Queue) == n {
			return qi.Group, true
		}
	}
	return 0, true
}

// byQueue sends a request naming a queue (?queue=) to the group holding it.
func (s *spanning) byQueue(w http.ResponseWriter, r *http.Request) {
	g, ok := s.groupOfQueue(w, r, r.URL.Query().Get("queue"))
	if !ok {
		return
	}
	if a, ok := s.one(w, r, g, sub(r, nil)); ok {
		pass(w, a)
	}
}

// everyGroup runs a request in every group and answers group 0's answer.
func (s *spanning) everyGroup(w http.ResponseWriter, r *http.Request) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	answers, ok := s.all(w, r, sub(r, b))
	if !ok || failed(w, answers, false) {
		return
	}
	pass(w, answers[0])
}

// anyDone runs a request naming something one group holds (a consumer
// group's state, a transaction, a timer) in every group: done when any
// group did it, else the first refusal that is not a 404.
func (s *spanning) anyDone(w http.ResponseWriter, r *http.Request) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	answers, ok := s.all(w, r, sub(r, b))
	if !ok {
		return
	}
	for _, a := range answers {
		if a.Status >= 300 && a.Status != http.StatusNotFound {
			pass(w, a)
			return
		}
	}
	for _, a := range answers {
		if a.Status < 300 {
			pass(w, a)
			return
		}
	}
	pass(w, answers[0])
}

// mergeSummary adds one group's share of a topic to the whole.
func mergeSummary(dst *apiv1.TopicSummary, src apiv1.TopicSummary) {
	dst.Queues += src.Queues
	dst.Messages += src.Messages
	dst.Bytes += src.Bytes
	dst.MessagesPerSec += src.MessagesPerSec
}

func (s *spanning) topics(w http.ResponseWriter, r *http.Request) {
	lists, ok := gather[[]apiv1.TopicSummary](s, w, r, sub(r, nil), false)
	if !ok {
		return
	}
	out := []apiv1.TopicSummary{}
	at := map[string]int{}
	for _, list := range lists {
		for _, t := range list {
			if i, ok := at[t.FullName]; ok {
				mergeSummary(&out[i], t)
				continue
			}
			at[t.FullName] = len(out)
			out = append(out, t)
		}
	}
	sortBy(out, func(t apiv1.TopicSummary) string { return t.FullName })
	writeJSON(w, out)
}

// topicDetail asks every group for a topic and merges their shares (ok
// false once it answered the failure).
func (s *spanning) topicDetail(w http.ResponseWriter, r *http.Request, topic string) (apiv1.TopicDetail, int, bool) {
	req := SubRequest{Method: http.MethodGet, Target: "/api/v1/topics/" + url.PathEscape(topic), Header: sub(r, nil).Header}
	shares, ok := gather[apiv1.TopicDetail](s, w, r, req, true)
	if !ok {
		return apiv1.TopicDetail{}, 0, false
	}
	d := shares[0]
	d.QueueList = append([]apiv1.QueueInfo(nil), d.QueueList...)
	for _, sh := range shares[1:] {
		mergeSummary(&d.TopicSummary, sh.TopicSummary)
		d.QueueList = append(d.QueueList, sh.QueueList...)
	}
	sortBy(d.QueueList, func(q apiv1.QueueInfo) int32 { return q.Queue })
	d.QueueList = mergeMovedQueues(d.QueueList)
	return d, len(shares), true
}

// mergeMovedQueues makes one entry of a moved queue's pieces (listed
// together, sorted by queue): its offsets from the first's start to the
// last's end, its bytes summed.
func mergeMovedQueues(qs []apiv1.QueueInfo) []apiv1.QueueInfo {
	out := qs[:0]
	for _, q := range qs {
		if n := len(out); n > 0 && out[n-1].Queue == q.Queue {
			m := &out[n-1]
			m.Start, m.End, m.Bytes = min(m.Start, q.Start), max(m.End, q.End), m.Bytes+q.Bytes
			if q.LocalStart > 0 && (m.LocalStart == 0 || q.LocalStart < m.LocalStart) {
				m.LocalStart = q.LocalStart
			}
			continue
		}
		out = append(out, q)
	}
	return out
}

func (s *spanning) topic(w http.ResponseWriter, r *http.Request) {
	if d, _, ok := s.topicDetail(w, r, r.PathValue("topic")); ok {
		writeJSON(w, d)
	}
}

// settle answers a topic change group 0 made once every group shows the
// topic with at least queues queues (other groups' leaders take it from
// the metadata store within moments), or as it is after a few seconds.
func (s *spanning) settle(w http.ResponseWriter, r *http.Request, status int, topic string, queues int) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		d, n, ok := s.topicDetail(&discard{}, r, topic)
		if ok && (n == s.ask.Groups() && d.Queues >= queues || time.Now().After(deadline)) {
			writeJSONStatus(w, status, d)
			return
		}
		if time.Now().After(deadline) || r.Context().Err() != nil {
			apiError(w, http.StatusServiceUnavailable, "unavailable", "the topic changed, but not every replication group shows it yet")
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *spanning) createTopic(w http.ResponseWriter, r *http.Request) {
	// Group 0's share tells the topic's whole queue count: its shares are
	// every G-th queue from 0.
	s.changeTopic(w, r, http.StatusCreated, func(d apiv1.TopicDetail, _ []byte) int {
		if n := len(d.QueueList); n > 0 {
			return int(d.QueueList[n-1].Queue) + 1
		}
		return 0
	})
}

func (s *spanning) alterTopic(w http.ResponseWriter, r *http.Request) {
	s.changeTopic(w, r, http.StatusOK, func(_ apiv1.TopicDetail, body []byte) int {
		var req apiv1.TopicAlter
		_ = json.Unmarshal(body, &req)
		return req.Queues
	})
}

// changeTopic has group 0 make a topic change (its broker stores it for
// every group) and, when it answers status, answers once every group shows
// the topic with as many queues as queues says.
func (s *spanning) changeTopic(w http.ResponseWriter, r *http.Request, status int, queues func(apiv1.TopicDetail, []byte) int) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	a, ok := s.one(w, r, 0, sub(r, b))
	if !ok {
		return
	}
	var d apiv1.TopicDetail
	if a.Status != status || json.Unmarshal(a.Body, &d) != nil {
		pass(w, a)
		return
	}
	s.settle(w, r, status, d.FullName, queues(d, b))
}

// publish sends a message to the group of its queue: the one named, else
// the one its key hashes to (as a single broker picks), else queue 0.
func (s *spanning) publish(w http.ResponseWriter, r *http.Request) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	var m apiv1.MessageSend
	g := 0 // group 0 also answers a bad body's error
	_ = json.Unmarshal(b, &m)
	switch {
	case m.Queue != nil:
		if g, ok = s.groupOfQueue(w, r, strconv.Itoa(int(*m.Queue))); !ok {
			return
		}
	case m.Key != "":
		d, _, ok := s.topicDetail(w, r, r.PathValue("topic"))
		if !ok {
			return
		}
		if d.Queues > 0 {
			h := fnv.New32a()
			h.Write([]byte(m.Key))
			q := int32(h.Sum32() % uint32(d.Queues))
			m.Queue = &q
			for _, qi := range d.QueueList {
				if qi.Queue == q {
					g = qi.Group
				}
			}
			if nb, err := json.Marshal(m); err == nil {
				b = nb
			}
		}
	}
	if a, ok := s.one(w, r, g, sub(r, b)); ok {
		pass(w, a)
	}
}

// discard is a ResponseWriter for answers nobody reads.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// Forward answers every request through group g's handler: the admin API
// of a member that does not lead group 0, answered by the member that
// does.
func Forward(ask GroupAsker, g int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := body(w, r)
		if !ok {
			return
		}
		a, err := ask.Ask(r.Context(), g, sub(r, b))
		if err != nil {
			apiError(w, http.StatusServiceUnavailable, "not_leader", fmt.Sprintf("the member leading replication group %d cannot be reached: %v", g, err))
			return
		}
		pass(w, a)
	})
}
