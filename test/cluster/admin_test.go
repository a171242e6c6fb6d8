//go:build !race

package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// adminCall asks the admin API of the member leading group 0 (the one
// answering for the whole cluster) and decodes its answer into out.
func (c *cluster) adminCall(ctx context.Context, t *testing.T, method, path string, body, out any) int {
	t.Helper()
	return c.adminCallAt(ctx, t, c.member(c.groupLeader(ctx, t, 0)), method, path, body, out)
}

// groupLeader is the member leading replication group g.
func (c *cluster) groupLeader(ctx context.Context, t *testing.T, g int) int {
	t.Helper()
	st, ok := c.status(ctx)
	if !ok || len(st.Groups) <= g || st.Groups[g].Leader == 0 {
		t.Fatalf("no member leads group %d", g)
	}
	return int(st.Groups[g].Leader)
}

// adminCallAt asks member m's admin API.
func (c *cluster) adminCallAt(ctx context.Context, t *testing.T, m *member, method, path string, body, out any) int {
	t.Helper()
	code, err := c.adminTry(ctx, t, m, method, path, body, out)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code
}

// adminTry is adminCallAt returning its error (for diagnostics, which
// must not fail a test).
func (c *cluster) adminTry(ctx context.Context, t *testing.T, m *member, method, path string, body, out any) (int, error) {
	t.Helper()
	var rd bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&rd).Encode(body)
	}
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second) // member changes wait for every group
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+net.JoinHostPort(m.host, strconv.Itoa(c.ports[5]))+path, &rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		t.Logf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// checkAdminOverGroups: the admin API answers for the whole cluster of
// three groups, in Kafka's partition numbers: the topic's six partitions
// with their messages, the consumer group's offsets in all of them (its
// coordinator holds them, whichever group holds the partition), a page
// of one partition, a dry-run reset over all, and a topic made through
// the API has its queues in every group.
func checkAdminOverGroups(ctx context.Context, t *testing.T, c *cluster, topic, group string, acked, partitions int) {
	t.Helper()
	var d apiv1.TopicDetail
	if s := c.adminCall(ctx, t, http.MethodGet, "/api/v1/topics/"+topic, nil, &d); s != http.StatusOK {
		t.Fatalf("GET topic: %d", s)
	}
	ends := map[int32]int64{}
	for i, q := range d.QueueList {
		if q.Queue != int32(i) {
			t.Fatalf("topic queues %+v: want 0..%d", d.QueueList, partitions-1)
		}
		ends[q.Queue] = q.End
	}
	if d.Queues != partitions || len(d.QueueList) != partitions || d.Messages < int64(acked) {
		t.Fatalf("topic %s: %d queues, %d listed, %d messages (%d acknowledged)", topic, d.Queues, len(d.QueueList), d.Messages, acked)
	}
	var g apiv1.GroupDetail
	if s := c.adminCall(ctx, t, http.MethodGet, "/api/v1/groups/"+group, nil, &g); s != http.StatusOK {
		t.Fatalf("GET group: %d", s)
	}
	seen := map[int32]bool{}
	for _, o := range g.Offsets {
		if o.Topic != topic {
			continue
		}
		seen[o.Queue] = true
		if o.End != ends[o.Queue] || o.Lag != max(0, o.End-o.Committed) {
			t.Fatalf("group offset %+v: the partition's end is %d", o, ends[o.Queue])
		}
	}
	if len(seen) != partitions {
		t.Fatalf("group %s has offsets in partitions %v of %s, want all %d", group, seen, topic, partitions)
	}
	var page apiv1.MessagePage
	if s := c.adminCall(ctx, t, http.MethodGet, "/api/v1/topics/"+topic+"/messages?queue=4&limit=5", nil, &page); s != http.StatusOK ||
		len(page.Messages) == 0 || page.Messages[0].Queue != 4 || page.End != ends[4] {
		t.Fatalf("page of partition 4: %d %+v (end %d)", s, page, ends[4])
	}
	var moves []apiv1.OffsetMove
	if s := c.adminCall(ctx, t, http.MethodPost, "/api/v1/groups/"+group+"/reset", apiv1.OffsetReset{Topic: topic, To: "latest", DryRun: true}, &moves); s != http.StatusOK || len(moves) != partitions {
		t.Fatalf("dry-run reset: %d %+v", s, moves)
	}
	for _, m := range moves {
		if m.To != ends[m.Queue] {
			t.Fatalf("dry-run reset to latest: %+v, the end is %d", m, ends[m.Queue])
		}
	}
	var made apiv1.TopicDetail
	if s := c.adminCall(ctx, t, http.MethodPost, "/api/v1/topics", apiv1.TopicCreate{Name: "groups-admin", Queues: 5}, &made); s != http.StatusCreated ||
		made.Queues != 5 || len(made.QueueList) != 5 {
		t.Fatalf("POST topic: %d %+v", s, made)
	}
	var list []apiv1.TopicSummary
	c.adminCall(ctx, t, http.MethodGet, "/api/v1/topics", nil, &list)
	got := map[string]int{}
	for _, s := range list {
		got[s.Name] = s.Queues
	}
	if got[topic] != partitions || got["groups-admin"] != 5 {
		t.Fatalf("topic list: %v", got)
	}
	// Another member answers the same, through the member leading group 0.
	other := c.member(c.groupLeader(ctx, t, 0)%3 + 1)
	var od apiv1.TopicDetail
	if s := c.adminCallAt(ctx, t, other, http.MethodGet, "/api/v1/topics/"+topic, nil, &od); s != http.StatusOK || od.Queues != partitions || od.Messages != d.Messages {
		t.Fatalf("GET topic from member %d: %d %+v", other.id, s, od.TopicSummary)
	}
	var doc map[string]any
	if s := c.adminCallAt(ctx, t, other, http.MethodGet, "/api/v1/openapi.json", nil, &doc); s != http.StatusOK || doc["paths"] == nil {
		t.Fatalf("GET openapi.json from member %d (group 0's answer): %d", other.id, s)
	}
	// Each member's /metrics has the brokers of the groups it leads, by
	// group.
	g1 := c.member(c.groupLeader(ctx, t, 1))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(g1.host, strconv.Itoa(c.ports[5]))+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte(`rosetta_storage_log_bytes{replication_group="1"}`)) {
		var seen []string
		for _, l := range strings.Split(string(body), "\n") {
			if strings.Contains(l, "log_bytes") || strings.Contains(l, "group=") && len(seen) < 20 {
				seen = append(seen, l)
			}
		}
		t.Fatalf("member %d's /metrics has no storage metrics of group 1: %s", g1.id, strings.Join(seen, "; "))
	}
	t.Logf("admin API over the groups: %s has %d messages in %d partitions; group %s lag %d; %s", topic, d.Messages, partitions, group, g.Lag, fmt.Sprint(got))
}
