package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// cannedGroups answers each group's requests from a table: path → the
// JSON of each group's answer (nil: 404).
type cannedGroups struct {
	answers map[string][]any
	mu      sync.Mutex
	asked   []string // "g method target"
}

func (c *cannedGroups) ask(_ context.Context, g int, req SubRequest) (SubAnswer, error) {
	c.mu.Lock()
	c.asked = append(c.asked, string(rune('0'+g))+" "+req.Method+" "+req.Target)
	c.mu.Unlock()
	per, ok := c.answers[req.Method+" "+req.Target]
	if !ok || per[g] == nil {
		return SubAnswer{Status: http.StatusNotFound, Body: []byte(`{"error":{"code":"not_found","message":"no"}}`)}, nil
	}
	b, _ := json.Marshal(per[g])
	return SubAnswer{Status: http.StatusOK, Body: b}, nil
}

func spanningOver(c *cannedGroups) http.Handler {
	return Spanning(http.NotFoundHandler(), GroupAsker{Groups: func() int { return 2 }, Ask: c.ask})
}

func get[T any](t *testing.T, h http.Handler, target string) (T, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	var v T
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
	}
	return v, rec.Code
}

func TestSpanningMergesTopicsAndGroups(t *testing.T) {
	c := &cannedGroups{answers: map[string][]any{
		"GET /api/v1/topics": {
			[]apiv1.TopicSummary{{Name: "a", FullName: "a", Queues: 2, Messages: 10, Bytes: 100}},
			[]apiv1.TopicSummary{{Name: "a", FullName: "a", Queues: 1, Messages: 5, Bytes: 50}, {Name: "b", FullName: "b", Queues: 1}},
		},
		"GET /api/v1/topics/a": {
			apiv1.TopicDetail{TopicSummary: apiv1.TopicSummary{Name: "a", FullName: "a", Queues: 2, Messages: 10},
				QueueList: []apiv1.QueueInfo{{Queue: 0, End: 7}, {Queue: 2, End: 3}}},
			apiv1.TopicDetail{TopicSummary: apiv1.TopicSummary{Name: "a", FullName: "a", Queues: 1, Messages: 5},
				QueueList: []apiv1.QueueInfo{{Queue: 1, End: 5}}},
		},
		// A Kafka group's coordinator (group 1) holds its offsets in every
		// queue, knowing the end of its own only.
		"GET /api/v1/groups/k": {nil, apiv1.GroupDetail{Name: "k", Type: "consumer", State: "Stable", Offsets: []apiv1.GroupOffset{
			{Topic: "a", Queue: 0, Committed: 4, End: -1}, {Topic: "a", Queue: 1, Committed: 5, End: 5}, {Topic: "a", Queue: 2, Committed: 1, End: -1}}}},
	}}
	h := spanningOver(c)
	list, code := get[[]apiv1.TopicSummary](t, h, "/api/v1/topics")
	if code != http.StatusOK || len(list) != 2 || list[0].Queues != 3 || list[0].Messages != 15 || list[0].Bytes != 150 {
		t.Fatalf("topics: %d %+v", code, list)
	}
	d, _ := get[apiv1.TopicDetail](t, h, "/api/v1/topics/a")
	if d.Queues != 3 || len(d.QueueList) != 3 || d.QueueList[1].Queue != 1 || d.QueueList[2].End != 3 {
		t.Fatalf("topic: %+v", d)
	}
	g, code := get[apiv1.GroupDetail](t, h, "/api/v1/groups/k")
	if code != http.StatusOK || len(g.Offsets) != 3 || g.Offsets[0].End != 7 || g.Offsets[0].Lag != 3 || g.Offsets[2].Lag != 2 || g.Lag != 5 || g.State != "Stable" {
		t.Fatalf("group: %d %+v", code, g)
	}
	if _, code := get[apiv1.GroupDetail](t, h, "/api/v1/groups/none"); code != http.StatusNotFound {
		t.Fatalf("unknown group: %d", code)
	}
}

func TestSpanningRoutesByQueue(t *testing.T) {
	c := &cannedGroups{answers: map[string][]any{
		"GET /api/v1/topics/a/messages?queue=3": {nil, apiv1.MessagePage{End: 9}},
		// Queue 3 is group 1's (as the topic's table says).
		"GET /api/v1/topics/a": {
			apiv1.TopicDetail{TopicSummary: apiv1.TopicSummary{Name: "a", FullName: "a", Queues: 2},
				QueueList: []apiv1.QueueInfo{{Queue: 0}, {Queue: 1}}},
			apiv1.TopicDetail{TopicSummary: apiv1.TopicSummary{Name: "a", FullName: "a", Queues: 2},
				QueueList: []apiv1.QueueInfo{{Queue: 2, Group: 1}, {Queue: 3, Group: 1}}},
		},
		"GET /api/v1/transactions": {
			apiv1.Transactions{RocketMQ: []apiv1.HalfMessage{{Offset: 4}}},
			apiv1.Transactions{RocketMQ: []apiv1.HalfMessage{{Offset: 4}}},
		},
	}}
	h := spanningOver(c)
	if p, code := get[apiv1.MessagePage](t, h, "/api/v1/topics/a/messages?queue=3"); code != http.StatusOK || p.End != 9 {
		t.Fatalf("page: %d %+v", code, p)
	}
	tx, _ := get[apiv1.Transactions](t, h, "/api/v1/transactions")
	if len(tx.RocketMQ) != 2 || tx.RocketMQ[0].Offset != 8 || tx.RocketMQ[1].Offset != 9 {
		t.Fatalf("half messages: %+v", tx.RocketMQ)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/transactions/rocketmq/9/commit", nil))
	if last := c.asked[len(c.asked)-1]; last != "1 POST /api/v1/transactions/rocketmq/4/commit" {
		t.Fatalf("commit of half 9 asked %q", last)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/deadletters/g/redrive", strings.NewReader(`{"offsets":[3]}`)))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("redrive of offsets without their queue: %d", rec.Code)
	}
}

// TestSpanningWaitsForAGroupsLeader: a read waits while a group cannot
// answer (its leader is being elected); a change does not repeat.
func TestSpanningWaitsForAGroupsLeader(t *testing.T) {
	c := &cannedGroups{answers: map[string][]any{
		"GET /api/v1/topics": {[]apiv1.TopicSummary{{Name: "a", FullName: "a", Queues: 1}}, []apiv1.TopicSummary{{Name: "a", FullName: "a", Queues: 1}}},
		"GET /api/v1/topics/a": {
			apiv1.TopicDetail{TopicSummary: apiv1.TopicSummary{Name: "a", FullName: "a", Queues: 1}, QueueList: []apiv1.QueueInfo{{Queue: 0}}},
			apiv1.TopicDetail{TopicSummary: apiv1.TopicSummary{Name: "a", FullName: "a", Queues: 1}, QueueList: []apiv1.QueueInfo{{Queue: 1, Group: 1}}},
		},
	}}
	failures := 2
	var mu sync.Mutex
	h := Spanning(http.NotFoundHandler(), GroupAsker{Groups: func() int { return 2 }, Ask: func(ctx context.Context, g int, req SubRequest) (SubAnswer, error) {
		mu.Lock()
		// Reads of the topic (where its queue is) answer: the send fails.
		fail := g == 1 && failures > 0 && req.Target != "/api/v1/topics/a"
		if fail {
			failures--
		}
		mu.Unlock()
		if fail {
			return SubAnswer{}, errors.New("no leader")
		}
		return c.ask(ctx, g, req)
	}})
	if list, code := get[[]apiv1.TopicSummary](t, h, "/api/v1/topics"); code != http.StatusOK || len(list) != 1 || list[0].Queues != 2 {
		t.Fatalf("topics while group 1 elects: %d %+v", code, list)
	}
	mu.Lock()
	failures = 1
	mu.Unlock()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/topics/a/messages", strings.NewReader(`{"queue":1,"body":"x"}`)))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("a send to a group without a leader: %d, want 503 at once", rec.Code)
	}
}

func TestSpanningSumsStorage(t *testing.T) {
	share := func(logBytes int64, queues []int64) map[string]any {
		return map[string]any{"log_bytes": logBytes, "live_bytes": logBytes / 2, "segments": []map[string]any{{"base": 0, "bytes": logBytes}},
			"topics": map[string]any{"t": map[string]any{"bytes": queues[0] + queues[1], "queues": queues}}}
	}
	c := &cannedGroups{answers: map[string][]any{"GET /api/v1/storage": {share(100, []int64{1, 2}), share(50, []int64{10, 20})}}}
	got, code := get[struct {
		LogBytes int64            `json:"log_bytes"`
		Segments []map[string]any `json:"segments"`
		Topics   map[string]struct {
			Bytes  int64   `json:"bytes"`
			Queues []int64 `json:"queues"`
		} `json:"topics"`
	}](t, spanningOver(c), "/api/v1/storage")
	if code != http.StatusOK || got.LogBytes != 150 || len(got.Segments) != 2 || got.Topics["t"].Bytes != 33 ||
		fmt.Sprint(got.Topics["t"].Queues) != "[1 10 2 20]" {
		t.Fatalf("storage: %d %+v", code, got)
	}
}

func TestSpanningSumsTiering(t *testing.T) {
	share := func(segments int, lastErr string, at time.Time) map[string]any {
		return map[string]any{"status": map[string]any{"enabled": true, "segments": segments, "bytes": segments * 10, "pending_bytes": 5,
			"cache_hits": 3, "last_error": lastErr, "last_error_at": at},
			"segments": []map[string]any{{"key": "k", "bytes": 10, "local": false}}}
	}
	now := time.Now()
	c := &cannedGroups{answers: map[string][]any{"GET /api/v1/storage/tier": {share(2, "old", now.Add(-time.Minute)), share(3, "new", now)}}}
	got, code := get[apiv1.TierReport](t, spanningOver(c), "/api/v1/storage/tier")
	st := got.Status
	if code != http.StatusOK || !st.Enabled || st.Segments != 5 || st.Bytes != 50 || st.PendingBytes != 10 || st.CacheHits != 6 ||
		st.LastError != "group 1: new" || len(got.Segments) != 2 || got.Segments[1].Group == nil || *got.Segments[1].Group != 1 {
		t.Fatalf("tier: %d %+v", code, got)
	}
}
