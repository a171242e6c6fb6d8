// Package admin_test drives the admin API v1 and the rosetta CLI against a
// node holding what real clients wrote: franz-go producers and a committing
// group, a RocketMQ producer with keys.
package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func init() { rlog.SetLogLevel("error") }

// api calls the admin API and decodes its JSON answer into out (when not
// nil); it returns the status.
func api(t *testing.T, base, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNoContent && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%s %s: %d answered %q, not JSON", method, path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

type apiErr struct {
	Error struct{ Code, Message string } `json:"error"`
}

// seed writes what the tests read: 30 Kafka records over 3 partitions of
// "orders" (keys k0..k29), a group "billing" that read and committed the
// first 20, and a RocketMQ message with KEYS.
func seed(t *testing.T, n *apptest.TestNode) (rmqID string) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if code := api(t, "http://"+n.HTTPAddr(), "POST", "/api/v1/topics", map[string]any{"name": "orders", "queues": 3}, nil); code != http.StatusCreated {
		t.Fatalf("create topic: %d", code)
	}
	for i := 0; i < 30; i++ {
		r := &kgo.Record{Partition: int32(i % 3), Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf(`{"order":%d}`, i)),
			Headers: []kgo.RecordHeader{{Key: "source", Value: []byte("test")}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	g, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("billing"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var read []*kgo.Record
	deadline := time.Now().Add(20 * time.Second)
	for len(read) < 30 && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		read = append(read, g.PollFetches(pctx).Records()...)
		cancel()
	}
	// Commit the first 20 read (in offset order per partition).
	var commit []*kgo.Record
	seen := map[int32]int{}
	for _, r := range read {
		if seen[r.Partition] < 20/3+1 && len(commit) < 20 {
			commit = append(commit, r)
			seen[r.Partition]++
		}
	}
	if err := g.CommitRecords(ctx, commit...); err != nil {
		t.Fatal(err)
	}
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("admin-test"), producer.WithInstanceName("admin-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	res, err := p.SendSync(ctx, primitive.NewMessage("invoices", []byte("invoice 7")).WithKeys([]string{"inv-7", "cust-3"}).WithTag("paid"))
	if err != nil {
		t.Fatal(err)
	}
	return res.MsgID
}

// TestAdminAPI: topics, queues, groups with lag, offset resets, message
// browsing and search through the admin API, errors in the documented
// shape, and an OpenAPI document naming every path.
func TestAdminAPI(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	base := "http://" + n.HTTPAddr()
	msgID := seed(t, n)

	var topics []apiv1.TopicSummary
	api(t, base, "GET", "/api/v1/topics", nil, &topics)
	byName := map[string]apiv1.TopicSummary{}
	for _, s := range topics {
		byName[s.Name] = s
	}
	if o := byName["orders"]; o.Queues != 3 || o.Messages != 30 || o.Bytes == 0 {
		t.Errorf("orders listed as %+v", o)
	}
	if _, ok := byName["invoices"]; !ok {
		t.Errorf("invoices not listed: %+v", topics)
	}
	var detail apiv1.TopicDetail
	api(t, base, "GET", "/api/v1/topics/orders", nil, &detail)
	if len(detail.QueueList) != 3 || detail.QueueList[1].End != 10 || detail.QueueList[1].Start != 0 {
		t.Errorf("orders detail %+v", detail)
	}
	var e apiErr
	if code := api(t, base, "GET", "/api/v1/topics/nope", nil, &e); code != 404 || e.Error.Code != "topic_not_found" {
		t.Errorf("unknown topic: %d %+v", code, e)
	}
	if code := api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "orders", "queues": 3}, &e); code != 409 || e.Error.Code != "topic_exists" {
		t.Errorf("existing topic: %d %+v", code, e)
	}

	// Groups and lag.
	var groups []apiv1.GroupSummary
	api(t, base, "GET", "/api/v1/groups", nil, &groups)
	if len(groups) != 1 || groups[0].Name != "billing" || groups[0].Lag != 10 {
		t.Errorf("groups %+v", groups)
	}
	var g apiv1.GroupDetail
	api(t, base, "GET", "/api/v1/groups/billing", nil, &g)
	if len(g.Offsets) != 3 || g.Lag != 10 {
		t.Errorf("billing %+v", g)
	}
	// A dry run moves nothing; a reset to the earliest moves every queue.
	var moves []apiv1.OffsetMove
	api(t, base, "POST", "/api/v1/groups/billing/reset", apiv1.OffsetReset{To: "earliest", DryRun: true}, &moves)
	if len(moves) != 3 || moves[0].To != 0 || moves[0].From <= 0 {
		t.Errorf("dry run %+v", moves)
	}
	api(t, base, "GET", "/api/v1/groups/billing", nil, &g)
	if g.Lag != 10 {
		t.Errorf("a dry run moved offsets: lag %d", g.Lag)
	}
	api(t, base, "POST", "/api/v1/groups/billing/reset", apiv1.OffsetReset{To: "earliest"}, &moves)
	api(t, base, "GET", "/api/v1/groups/billing", nil, &g)
	if g.Lag != 30 {
		t.Errorf("after a reset to the earliest, lag %d", g.Lag)
	}
	api(t, base, "POST", "/api/v1/groups/billing/reset", apiv1.OffsetReset{To: "offset", Topic: "orders", Queues: []int32{2}, Offset: 7}, &moves)
	api(t, base, "GET", "/api/v1/groups/billing", nil, &g)
	if g.Offsets[2].Committed != 7 || g.Lag != 23 {
		t.Errorf("after a reset of queue 2 to 7: %+v", g)
	}
	if code := api(t, base, "POST", "/api/v1/groups/billing/reset", map[string]any{"to": "sideways"}, &e); code != 400 {
		t.Errorf("bad reset: %d %+v", code, e)
	}

	// Browse: oldest, from an offset, newest.
	var page apiv1.MessagePage
	api(t, base, "GET", "/api/v1/topics/orders/messages?queue=1&limit=4", nil, &page)
	if len(page.Messages) != 4 || page.Messages[0].Offset != 0 || page.NextOffset != 4 || page.End != 10 {
		t.Fatalf("first page %+v", page)
	}
	m := page.Messages[0]
	if m.Key != "k1" || m.Body != `{"order":1}` || m.BodyEncoding != "text" || len(m.Headers) != 1 || m.Headers[0].Value != "test" {
		t.Errorf("message %+v", m)
	}
	api(t, base, "GET", "/api/v1/topics/orders/messages?queue=1&offset=8&limit=4", nil, &page)
	if len(page.Messages) != 2 || page.Messages[0].Offset != 8 {
		t.Errorf("from offset 8: %+v", page)
	}
	api(t, base, "GET", "/api/v1/topics/orders/messages?queue=0&from=newest&limit=3", nil, &page)
	if len(page.Messages) != 3 || page.Messages[2].Offset != 9 {
		t.Errorf("newest: %+v", page)
	}

	// Search by a RocketMQ key and by message id.
	var found []apiv1.MessageView
	api(t, base, "GET", "/api/v1/messages?key=cust-3", nil, &found)
	if len(found) != 1 || found[0].Body != "invoice 7" || found[0].Tags != "paid" || found[0].Topic != "invoices" {
		t.Errorf("by key: %+v", found)
	}
	api(t, base, "GET", "/api/v1/messages?key="+url.QueryEscape(msgID)+"&topic=invoices", nil, &found)
	if len(found) != 1 || found[0].Body != "invoice 7" {
		t.Errorf("by message id %s: %+v", msgID, found)
	}

	// Dashboards chart rates and lag from /metrics.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`rosetta_topic_end_offsets{topic="orders"} 30`, `rosetta_topic_messages{topic="orders"} 30`,
		`rosetta_group_lag{group="billing",topic="orders"} 23`, `rosetta_group_committed_offsets{group="billing",topic="orders"} 7`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Delete the group, then the topic.
	if code := api(t, base, "DELETE", "/api/v1/groups/billing", nil, nil); code != 204 {
		t.Errorf("delete group: %d", code)
	}
	if code := api(t, base, "GET", "/api/v1/groups/billing", nil, &e); code != 404 || e.Error.Code != "group_not_found" {
		t.Errorf("deleted group: %d %+v", code, e)
	}
	if code := api(t, base, "DELETE", "/api/v1/topics/invoices", nil, nil); code != 204 {
		t.Errorf("delete topic: %d", code)
	}

	// The OpenAPI document names every path it describes, and each answers.
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	api(t, base, "GET", "/api/v1/openapi.json", nil, &doc)
	if !strings.HasPrefix(doc.OpenAPI, "3.") || len(doc.Paths) < 15 {
		t.Fatalf("openapi document: %s with %d paths", doc.OpenAPI, len(doc.Paths))
	}
	for p, ops := range doc.Paths {
		for method := range ops {
			if method != "get" {
				continue
			}
			path := strings.NewReplacer("{topic}", "orders", "{group}", "nobody", "{id}", "x", "{name}", "x", "{kind}", "tenant").Replace(p)
			req, _ := http.NewRequest("GET", base+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotFound && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("GET %s (documented): %d", p, resp.StatusCode)
			}
		}
	}
}
