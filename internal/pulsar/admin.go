package pulsar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// The Pulsar admin REST subset the clients, their tests and pulsar-admin
// style tools call, under /admin/v2 on the HTTP port, with Pulsar's status
// codes and JSON shapes (errors are {"reason": "..."}):
//
//	topics:        PUT|GET|POST|DELETE persistent/{t}/{ns}/{topic}/partitions,
//	               PUT|DELETE persistent/{t}/{ns}/{topic}, GET persistent/{t}/{ns},
//	               GET persistent/{t}/{ns}/partitioned,
//	               GET persistent/{t}/{ns}/{topic}/stats|partitioned-stats|internalStats|subscriptions
//	subscriptions: PUT|DELETE .../subscription/{sub}, POST .../subscription/{sub}/resetcursor[/{ms}],
//	               POST .../subscription/{sub}/skip/{n}|skip_all|expireMessages/{s}
//	tenants:       GET tenants, GET|PUT|POST|DELETE tenants/{t}
//	namespaces:    GET namespaces/{t}, GET|PUT|DELETE namespaces/{t}/{ns}, GET namespaces/{t}/{ns}/topics
//	clusters:      GET clusters
//	schemas:       GET schemas/{t}/{ns}/{topic}/schema (none are stored: 404)
//
// and the HTTP lookup GET /lookup/v2/topic/persistent/{t}/{ns}/{topic}.
// Tenants and namespaces are kept in the metadata store (public and
// public/default always exist; one holding topics exists too).

// Metadata keys of tenants and namespaces made over the admin API.
const (
	tenantPrefix    = "pulsar/tenants/"
	namespacePrefix = "pulsar/namespaces/"
)

// AdminHandler serves the admin REST subset and the HTTP lookup; guard
// wraps each endpoint (the node's admin authentication).
func (s *Server) AdminHandler(guard func(http.HandlerFunc) http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, fn http.HandlerFunc) { mux.HandleFunc(pattern, guard(fn)) }
	const topic = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
	h("PUT "+topic+"/partitions", s.adminCreatePartitioned)
	h("POST "+topic+"/partitions", s.adminUpdatePartitions)
	h("GET "+topic+"/partitions", s.adminPartitions)
	h("DELETE "+topic+"/partitions", s.adminDeleteTopic)
	h("PUT "+topic, s.adminCreateTopic)
	h("DELETE "+topic, s.adminDeleteTopic)
	h("GET /admin/v2/persistent/{tenant}/{ns}", s.adminListTopics)
	h("GET /admin/v2/persistent/{tenant}/{ns}/partitioned", s.adminListPartitioned)
	// Endpoints over a topic's queues: answered where each queue is
	// served (admin_cluster.go).
	all := func(fn http.HandlerFunc, merge merger) http.HandlerFunc { return s.spanning(fn, merge, allPartitions) }
	first := func(fn http.HandlerFunc) http.HandlerFunc { return s.spanning(fn, mergeNoContent, firstPartition) }
	h("PUT "+topic+"/unload", all(s.adminUnload, mergeNoContent))
	h("GET "+topic+"/ledger/{ledger}/entry/{entry}", first(s.adminEntry))
	h("GET "+topic+"/stats", all(s.adminStats, mergeStats))
	h("GET "+topic+"/partitioned-stats", all(s.adminStats, mergeStats))
	h("GET "+topic+"/internalStats", first(s.adminInternalStats))
	h("GET "+topic+"/subscriptions", all(s.adminSubscriptions, mergeNames))
	h("PUT "+topic+"/subscription/{sub}", all(s.adminCreateSubscription, mergeNoContent))
	h("DELETE "+topic+"/subscription/{sub}", all(s.adminDeleteSubscription, mergeNoContent))
	h("POST "+topic+"/subscription/{sub}/resetcursor/{ms}", all(s.adminResetCursor, mergeNoContent))
	h("POST "+topic+"/subscription/{sub}/resetcursor", all(s.adminResetCursor, mergeNoContent))
	h("POST "+topic+"/subscription/{sub}/skip/{n}", all(s.adminSkip, mergeNoContent))
	h("POST "+topic+"/subscription/{sub}/skip_all", all(s.adminSkip, mergeNoContent))
	h("POST "+topic+"/subscription/{sub}/expireMessages/{seconds}", all(s.adminExpire, mergeNoContent))
	h("GET /admin/v2/tenants", s.adminTenants)
	h("GET /admin/v2/tenants/{tenant}", s.adminTenant)
	h("PUT /admin/v2/tenants/{tenant}", s.adminPutTenant)
	h("POST /admin/v2/tenants/{tenant}", s.adminPutTenant)
	h("DELETE /admin/v2/tenants/{tenant}", s.adminDeleteTenant)
	h("GET /admin/v2/namespaces/{tenant}", s.adminNamespaces)
	h("GET /admin/v2/namespaces/{tenant}/{ns}", s.adminNamespace)
	h("PUT /admin/v2/namespaces/{tenant}/{ns}", s.adminPutNamespace)
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}", s.adminDeleteNamespace)
	h("GET /admin/v2/namespaces/{tenant}/{ns}/topics", s.adminListTopics)
	h("GET /admin/v2/clusters", func(w http.ResponseWriter, _ *http.Request) { adminJSON(w, []string{"standalone"}) })
	h("GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema", func(w http.ResponseWriter, _ *http.Request) {
		adminError(w, http.StatusNotFound, "Schema not found")
	})
	h("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", s.adminLookup)
	h("/admin/v2/", func(w http.ResponseWriter, r *http.Request) {
		adminError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

func adminJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func adminError(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"reason": reason})
}

// adminFail maps a broker error to Pulsar's status codes.
func adminFail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, model.ErrUnknownTopic), errors.Is(err, model.ErrUnknownQueue), errors.Is(err, meta.ErrNotFound),
		errors.Is(err, errNoSubscription):
		code = http.StatusNotFound
	case errors.Is(err, model.ErrTopicExists), errors.Is(err, errExists):
		code = http.StatusConflict
	case errors.Is(err, model.ErrInvalidTopic), errors.Is(err, model.ErrInvalidQueueCount), errors.Is(err, model.ErrInvalidConfig),
		errors.Is(err, errBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, errPrecondition), errors.Is(err, ErrConsumerBusy):
		code = http.StatusPreconditionFailed
	case errors.Is(err, model.ErrNotLeader):
		code = http.StatusServiceUnavailable
	}
	adminError(w, code, err.Error())
}

var (
	errExists         = errors.New("already exists")
	errBadRequest     = errors.New("bad request")
	errPrecondition   = errors.New("precondition failed")
	errNoSubscription = errors.New("subscription not found")
)

// pathTopic resolves the topic a request's path names.
func pathTopic(r *http.Request) (TopicRef, error) {
	return ParseTopic("persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic"))
}

// readCount reads a partition count body: a bare JSON number, or the
// metadata object newer admin clients send ({"partitions": n, ...}).
func readCount(r *http.Request) (int, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		var md struct {
			Partitions int `json:"partitions"`
		}
		if json.Unmarshal(b, &md) == nil {
			n, err = md.Partitions, nil
		}
	}
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: partition count %q", errBadRequest, b)
	}
	return n, nil
}

func (s *Server) adminCreatePartitioned(w http.ResponseWriter, r *http.Request) {
	ref, err := pathTopic(r)
	if err == nil && ref.Partition >= 0 {
		err = fmt.Errorf("%w: %s names a partition", model.ErrInvalidTopic, ref)
	}
	n := 0
	if err == nil {
		n, err = readCount(r)
	}
	if err == nil {
		_, err = s.b.CreateWholeTopic(r.Context(), ref.Name, n, broker.TopicConfig{})
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminUpdatePartitions(w http.ResponseWriter, r *http.Request) {
	ref, err := pathTopic(r)
	n := 0
	if err == nil {
		n, err = readCount(r)
	}
	var t *broker.Topic
	if err == nil {
		t, err = s.b.Topic(ref.Name)
	}
	if err == nil && n < len(t.All) {
		err = fmt.Errorf("%w: partitions can only grow (%d now)", errPrecondition, len(t.All))
	}
	if err == nil && n > len(t.All) {
		_, err = s.b.GrowWholeTopic(r.Context(), ref.Name, n)
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminPartitions(w http.ResponseWriter, r *http.Request) {
	ref, err := pathTopic(r)
	if err != nil {
		adminFail(w, err)
		return
	}
	n := 0
	if t, err := s.b.Topic(ref.Name); err == nil && len(t.All) > 1 && ref.Partition < 0 {
		n = len(t.All)
	}
	adminJSON(w, map[string]any{"partitions": n, "properties": map[string]string{}})
}

func (s *Server) adminCreateTopic(w http.ResponseWriter, r *http.Request) {
	ref, err := pathTopic(r)
	if err == nil && ref.Partition >= 0 {
		err = fmt.Errorf("%w: %s names a partition", model.ErrInvalidTopic, ref)
	}
	if err == nil {
		_, err = s.b.CreateWholeTopic(r.Context(), ref.Name, 1, broker.TopicConfig{})
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminDeleteTopic(w http.ResponseWriter, r *http.Request) {
	ref, err := pathTopic(r)
	if err == nil && ref.Partition >= 0 {
		err = fmt.Errorf("%w: a partition is deleted with its topic", errPrecondition)
	}
	if err == nil && r.URL.Query().Get("force") != "true" && s.inUse(ref.Name) {
		err = fmt.Errorf("%w: the topic has connected producers or consumers", errPrecondition)
	}
	if err == nil {
		err = s.b.DeleteTopic(r.Context(), ref.Name)
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// adminUnload closes the topic's producers and consumers (they look it up
// and connect again), as Pulsar's unload does.
func (s *Server) adminUnload(w http.ResponseWriter, r *http.Request) {
	t, idx, _, err := s.pathQueues(r)
	if err != nil {
		adminFail(w, err)
		return
	}
	for _, i := range idx {
		q, _ := t.Queue(i)
		for _, p := range s.live.producersOf(q) {
			p.c.closeProducer(p)
		}
	}
	for _, sub := range s.subsOf(t) {
		if slices.Contains(idx, sub.base().index) {
			for _, v := range sub.consumerViews() {
				v.co.c.closeConsumer(v.co)
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// adminEntry answers one entry as Pulsar's message peek does: the batch
// payload, its message count and the message id in headers.
func (s *Server) adminEntry(w http.ResponseWriter, r *http.Request) {
	ref, err := pathTopic(r)
	var t *broker.Topic
	if err == nil {
		t, err = s.b.Topic(ref.Name)
	}
	var off int64
	if err == nil {
		if off, err = strconv.ParseInt(r.PathValue("entry"), 10, 64); err != nil {
			err = fmt.Errorf("%w: entry %q", errBadRequest, r.PathValue("entry"))
		}
	}
	var index int32
	if err == nil {
		var ok bool
		if index, ok = s.localIndex(t, max(ref.Partition, 0)); !ok {
			err = fmt.Errorf("%w: partition %d of %s", model.ErrUnknownQueue, max(ref.Partition, 0), ref.Name)
		}
	}
	var q model.QueueID
	if err == nil {
		q, _, err = s.b.QueueID(ref.Name, index)
	}
	var res *broker.ReadResult
	if err == nil {
		res, err = s.b.Read(ref.Name, index, model.QueueOffset(off), readOne())
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	defer res.Release()
	for i := range res.Records {
		rec := &res.Records[i]
		if int64(rec.BaseOffset) != off {
			continue
		}
		e, ok, err := s.encodeEntry(q, rec)
		if err != nil || !ok {
			break
		}
		h := w.Header()
		h.Set("X-Pulsar-Message-ID", fmt.Sprintf("%d:%d:%d", ledgerID(t), off, ref.Partition))
		h.Set("X-Pulsar-Num-Batch-Message", strconv.Itoa(e.count))
		h.Set("X-Pulsar-Publish-Time", time.UnixMilli(e.publishTime).UTC().Format(time.RFC3339Nano))
		h.Set("X-Pulsar-Producer-Name", e.producer)
		h.Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(e.payload)
		return
	}
	adminError(w, http.StatusNotFound, "Entry not found")
}

// inUse says whether a topic has connected producers or consumers.
func (s *Server) inUse(name model.TopicName) bool {
	t, err := s.b.Topic(name)
	if err != nil {
		return false
	}
	for _, q := range t.Queues {
		if len(s.live.producersOf(q)) > 0 {
			return true
		}
	}
	for _, sub := range s.subsOf(t) {
		if sub.consumerCount() > 0 {
			return true
		}
	}
	return false
}

// subsOf lists a topic's live subscriptions.
func (s *Server) subsOf(t *broker.Topic) []cursor {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	var out []cursor
	for _, sub := range s.subs.m {
		if sub.base().topic == t.Name {
			out = append(out, sub)
		}
	}
	return out
}

// topicNames lists a namespace's topics as Pulsar names: each partition
// of a partitioned topic, and (partitioned) the partitioned ones alone.
func (s *Server) topicNames(tenant, ns string, partitioned bool) []string {
	names := []string{}
	for _, t := range s.b.Topics(false) {
		if t.Name.Tenant != tenant || t.Name.Namespace != ns {
			continue
		}
		base := "persistent://" + t.Name.String()
		switch {
		case partitioned:
			if len(t.All) > 1 {
				names = append(names, base)
			}
		case len(t.All) <= 1:
			names = append(names, base)
		default:
			for i := range t.All {
				names = append(names, base+partitionSuffix+strconv.Itoa(i))
			}
		}
	}
	return names
}

func (s *Server) adminListTopics(w http.ResponseWriter, r *http.Request) {
	adminJSON(w, s.topicNames(r.PathValue("tenant"), r.PathValue("ns"), false))
}

func (s *Server) adminListPartitioned(w http.ResponseWriter, r *http.Request) {
	adminJSON(w, s.topicNames(r.PathValue("tenant"), r.PathValue("ns"), true))
}

// queuesOf is the queues a topic reference addresses — one partition, or
// all of them — that this node serves, by the broker's indexes.
func (s *Server) queuesOf(ref TopicRef) (*broker.Topic, []int32, error) {
	t, err := s.b.Topic(ref.Name)
	if err != nil {
		return nil, nil, err
	}
	if ref.Partition >= 0 {
		i, ok := s.localIndex(t, ref.Partition)
		if !ok {
			return nil, nil, fmt.Errorf("%w: partition %d of %s", model.ErrUnknownQueue, ref.Partition, ref.Name)
		}
		return t, []int32{i}, nil
	}
	var idx []int32
	for p := range t.All {
		if i, ok := s.localIndex(t, p); ok {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, nil, fmt.Errorf("%w: no partition of %s is served here", model.ErrUnknownQueue, ref.Name)
	}
	return t, idx, nil
}

// pathQueues resolves the request path's topic and the queues it names.
func (s *Server) pathQueues(r *http.Request) (*broker.Topic, []int32, TopicRef, error) {
	ref, err := pathTopic(r)
	if err != nil {
		return nil, nil, ref, err
	}
	t, idx, err := s.queuesOf(ref)
	return t, idx, ref, err
}

// subscriptionNames lists the subscriptions of a topic's queues: those
// with consumers and those with a committed position.
func (s *Server) subscriptionNames(t *broker.Topic, idx []int32) []string {
	seen := map[string]bool{}
	for _, sub := range s.subsOf(t) {
		if slices.Contains(idx, sub.base().index) {
			seen[sub.base().key.name] = true
		}
	}
	for _, g := range s.b.OffsetGroups() {
		if seen[g] {
			continue
		}
		got, err := s.b.FetchOffsets(g, t.Name)
		if err != nil {
			continue
		}
		for _, i := range idx {
			if _, ok := got[i]; ok {
				seen[g] = true
				break
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (s *Server) adminSubscriptions(w http.ResponseWriter, r *http.Request) {
	t, idx, _, err := s.pathQueues(r)
	if err != nil {
		adminFail(w, err)
		return
	}
	adminJSON(w, s.subscriptionNames(t, idx))
}

// subscriptionPosition is a subscription's position on queue i: its live
// cursor's, else its committed offset (ok false: none).
func (s *Server) subscriptionPosition(t *broker.Topic, i int32, name string) (model.QueueOffset, bool) {
	q, _ := t.Queue(i)
	s.subs.mu.Lock()
	sub := s.subs.m[subKey{queue: q, name: name}]
	s.subs.mu.Unlock()
	if sub != nil {
		return sub.position(), true
	}
	got, err := s.b.FetchOffsets(name, t.Name)
	if err != nil {
		return 0, false
	}
	c, ok := got[i]
	return c.Offset, ok
}

// setPosition moves a subscription on queue i to off: its live cursor
// seeks (its consumers are closed, to subscribe again from there), else
// the committed offset — and a POP group's state — moves.
func (s *Server) setPosition(ctx context.Context, t *broker.Topic, i int32, name string, off model.QueueOffset) error {
	q, _ := t.Queue(i)
	start, hw, _, err := s.b.Offsets(t.Name, i)
	if err != nil {
		return err
	}
	off = min(max(off, start), hw)
	s.subs.mu.Lock()
	sub := s.subs.m[subKey{queue: q, name: name}]
	s.subs.mu.Unlock()
	if sub != nil {
		if err := sub.seek(ctx, off); err != nil {
			return err
		}
		for _, v := range sub.consumerViews() {
			v.co.c.closeConsumer(v.co)
		}
		return nil
	}
	if err := s.b.CommitOffsets(ctx, name, t.Name, map[int32]broker.OffsetCommit{i: {Queue: q, Offset: off, LeaderEpoch: -1}}); err != nil {
		return err
	}
	if p := s.opts.Pop; p != nil && len(p.Progress(name, 0)) > 0 {
		return p.Reset(ctx, name, q, off)
	}
	return nil
}

// ensureSubscription makes a subscription at the queue's end unless it
// has a position.
func (s *Server) ensureSubscription(ctx context.Context, t *broker.Topic, i int32, name string) error {
	if _, ok := s.subscriptionPosition(t, i, name); ok {
		return nil
	}
	_, hw, _, err := s.b.Offsets(t.Name, i)
	if err != nil {
		return err
	}
	q, _ := t.Queue(i)
	return s.b.CommitOffsets(ctx, name, t.Name, map[int32]broker.OffsetCommit{i: {Queue: q, Offset: hw, LeaderEpoch: -1}})
}

// messageIDBody is the message id admin requests carry.
type messageIDBody struct {
	LedgerID       int64 `json:"ledgerId"`
	EntryID        int64 `json:"entryId"`
	PartitionIndex int32 `json:"partitionIndex"`
	BatchIndex     int32 `json:"batchIndex"`
}

// readMessageID reads an optional message id body: latest when absent.
func readMessageID(r *http.Request) (messageIDBody, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil {
		return messageIDBody{}, false, err
	}
	if len(strings.TrimSpace(string(b))) == 0 || strings.TrimSpace(string(b)) == "null" {
		return messageIDBody{}, false, nil
	}
	var id messageIDBody
	if err := json.Unmarshal(b, &id); err != nil {
		return id, false, fmt.Errorf("%w: message id: %v", errBadRequest, err)
	}
	return id, true, nil
}

// offsetOfID is the queue offset a message id names (earliest and latest
// included).
func offsetOfID(id messageIDBody, start, hw model.QueueOffset) model.QueueOffset {
	switch {
	case id.LedgerID == int64(^uint64(0)>>1) || id.EntryID == int64(^uint64(0)>>1):
		return hw
	case id.LedgerID < 0 || id.EntryID < 0:
		return start
	}
	return model.QueueOffset(id.EntryID) + model.QueueOffset(max(id.BatchIndex, 0))
}

func (s *Server) adminCreateSubscription(w http.ResponseWriter, r *http.Request) {
	t, idx, _, err := s.pathQueues(r)
	var id messageIDBody
	given := false
	if err == nil {
		id, given, err = readMessageID(r)
	}
	name := r.PathValue("sub")
	for _, i := range idx {
		if err != nil {
			break
		}
		if _, ok := s.subscriptionPosition(t, i, name); ok {
			err = fmt.Errorf("%w: subscription %s", errExists, name)
			break
		}
		var start, hw model.QueueOffset
		if start, hw, _, err = s.b.Offsets(t.Name, i); err != nil {
			break
		}
		off := hw
		if given {
			off = offsetOfID(id, start, hw)
		}
		q, _ := t.Queue(i)
		err = s.b.CommitOffsets(r.Context(), name, t.Name, map[int32]broker.OffsetCommit{i: {Queue: q, Offset: off, LeaderEpoch: -1}})
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminDeleteSubscription(w http.ResponseWriter, r *http.Request) {
	t, idx, _, err := s.pathQueues(r)
	name := r.PathValue("sub")
	force := r.URL.Query().Get("force") == "true"
	found := false
	for _, i := range idx {
		if err != nil {
			break
		}
		q, _ := t.Queue(i)
		s.subs.mu.Lock()
		sub := s.subs.m[subKey{queue: q, name: name}]
		s.subs.mu.Unlock()
		if sub != nil {
			if sub.consumerCount() > 0 && !force {
				err = fmt.Errorf("%w: subscription %s has active consumers", errPrecondition, name)
				break
			}
			for _, v := range sub.consumerViews() {
				v.co.c.closeConsumer(v.co)
			}
			s.subs.forget(sub)
			sub.stop()
			found = true
		}
		if _, ok := s.subscriptionPosition(t, i, name); ok {
			found = true
		}
	}
	if err == nil && !found {
		err = fmt.Errorf("%w: %s", errNoSubscription, name)
	}
	if err == nil {
		err = s.b.DeleteOffsets(r.Context(), name, t.Name, idx)
	}
	for _, i := range idx {
		if err != nil {
			break
		}
		q, _ := t.Queue(i)
		err = s.forgetPop(r.Context(), name, q)
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// forgetPop drops the POP state a deleted Shared subscription left on a
// queue, so one made again under its name starts afresh.
func (s *Server) forgetPop(ctx context.Context, name string, q model.QueueID) error {
	p := s.opts.Pop
	if p == nil {
		return nil
	}
	for _, pr := range p.Progress(name, 0) {
		if pr.Queue == q {
			return p.Forget(ctx, name, q)
		}
	}
	return nil
}

// eachSubscriptionQueue runs fn on every queue of the request's topic the
// subscription exists on.
func (s *Server) eachSubscriptionQueue(w http.ResponseWriter, r *http.Request, fn func(t *broker.Topic, i int32, pos, start, hw model.QueueOffset) (model.QueueOffset, error)) {
	t, idx, _, err := s.pathQueues(r)
	name := r.PathValue("sub")
	found := false
	for _, i := range idx {
		if err != nil {
			break
		}
		pos, ok := s.subscriptionPosition(t, i, name)
		if !ok {
			continue
		}
		found = true
		var start, hw, off model.QueueOffset
		if start, hw, _, err = s.b.Offsets(t.Name, i); err != nil {
			break
		}
		if off, err = fn(t, i, pos, start, hw); err == nil {
			err = s.setPosition(r.Context(), t, i, name, off)
		}
	}
	if err == nil && !found {
		err = fmt.Errorf("%w: %s", errNoSubscription, name)
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminResetCursor(w http.ResponseWriter, r *http.Request) {
	if ms := r.PathValue("ms"); ms != "" {
		ts, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			adminFail(w, fmt.Errorf("%w: timestamp %q", errBadRequest, ms))
			return
		}
		s.eachSubscriptionQueue(w, r, func(t *broker.Topic, i int32, _, _, hw model.QueueOffset) (model.QueueOffset, error) {
			off, _, err := s.b.OffsetForTime(t.Name, i, ts)
			if err == nil && off < 0 {
				off = hw
			}
			return off, err
		})
		return
	}
	id, given, err := readMessageID(r)
	if err == nil && !given {
		err = fmt.Errorf("%w: a message id is required", errBadRequest)
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	s.eachSubscriptionQueue(w, r, func(t *broker.Topic, i int32, _, start, hw model.QueueOffset) (model.QueueOffset, error) {
		if id.PartitionIndex >= 0 && int(id.PartitionIndex) != s.globalIndex(t, i) && strings.Contains(r.PathValue("topic"), partitionSuffix) {
			return hw, nil
		}
		return offsetOfID(id, start, hw), nil
	})
}

func (s *Server) adminSkip(w http.ResponseWriter, r *http.Request) {
	n := int64(-1) // skip_all
	if v := r.PathValue("n"); v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			adminFail(w, fmt.Errorf("%w: count %q", errBadRequest, v))
			return
		}
	}
	s.eachSubscriptionQueue(w, r, func(_ *broker.Topic, _ int32, pos, _, hw model.QueueOffset) (model.QueueOffset, error) {
		if n < 0 {
			return hw, nil
		}
		return min(pos+model.QueueOffset(n), hw), nil
	})
}

func (s *Server) adminExpire(w http.ResponseWriter, r *http.Request) {
	secs, err := strconv.ParseInt(r.PathValue("seconds"), 10, 64)
	if err != nil || secs < 0 {
		adminFail(w, fmt.Errorf("%w: seconds %q", errBadRequest, r.PathValue("seconds")))
		return
	}
	ts := time.Now().Add(-time.Duration(secs) * time.Second).UnixMilli()
	s.eachSubscriptionQueue(w, r, func(t *broker.Topic, i int32, pos, _, hw model.QueueOffset) (model.QueueOffset, error) {
		off, _, err := s.b.OffsetForTime(t.Name, i, ts)
		if err == nil && off < 0 {
			off = hw
		}
		return max(off, pos), err
	})
}

func (s *Server) adminLookup(w http.ResponseWriter, r *http.Request) {
	ref, err := pathTopic(r)
	if err != nil {
		adminFail(w, err)
		return
	}
	if s.opts.GroupAddr != nil {
		// (nil when the request was forwarded from another member)
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		var remote net.Addr
		if a, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
			remote = a
		}
		plain, secured, err := s.groupURLs(r.Context(), ref.String(), local, remote)
		if err != nil {
			adminFail(w, err)
			return
		}
		adminJSON(w, map[string]string{"brokerUrl": plain, "brokerUrlTls": secured,
			"httpUrl": "http://" + r.Host, "httpUrlTls": "https://" + r.Host, "nativeUrl": plain})
		return
	}
	s.addrMu.Lock()
	pl, sl := s.plain, s.secured
	s.addrMu.Unlock()
	if sl == "" {
		sl = pl
	}
	local := r.Host
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local = a.String()
	}
	plain, secured := reachable(pl, local), reachable(sl, local)
	if a := s.opts.AdvertisedAddr; a != "" {
		plain, secured = a, a
	}
	host := r.Host
	adminJSON(w, map[string]string{"brokerUrl": "pulsar://" + plain, "brokerUrlTls": "pulsar+ssl://" + secured,
		"httpUrl": "http://" + host, "httpUrlTls": "https://" + host, "nativeUrl": "pulsar://" + plain})
}
