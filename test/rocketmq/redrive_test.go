package rocketmq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// adminJSON calls the admin API and decodes its answer.
func adminJSON(t *testing.T, base, method, path string, body, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %d: %v", method, path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode
}

// TestDeadLetterRedrive: messages a push consumer kept failing land in
// %DLQ%<group>; the admin API lists the group's dead letters with their
// origin topic, and re-drives chosen ones to the origin topic — keys, tags
// and properties kept, retry count reset, findable by key again — or all of
// them to the group's retry topic.
func TestDeadLetterRedrive(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr, base := n.RemotingAddr(), "http://"+n.HTTPAddr()
	p := startProducer(t, addr, "redrive-pg")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		m := primitive.NewMessage("redrive-work", []byte(fmt.Sprintf("task%d", i))).WithKeys([]string{fmt.Sprintf("task-key-%d", i)}).WithTag("urgent")
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	stop := startConsumer(t, addr, "redrive-cg", "redrive-work", consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		cc, _ := primitive.GetConcurrentlyCtx(ctx)
		cc.DelayLevelWhenNextConsume = 1
		return consumer.ConsumeRetryLater, nil
	}, consumer.WithMaxReconsumeTimes(1))
	var dl []apiv1.DeadLetterSummary
	eventually(t, 30*time.Second, "three dead letters", func() bool {
		adminJSON(t, base, "GET", "/api/v1/deadletters", nil, &dl)
		return len(dl) == 1 && dl[0].Messages == 3
	})
	stop()
	if dl[0].Group != "redrive-cg" || dl[0].Topic != "%DLQ%redrive-cg" {
		t.Fatalf("dead letters %+v", dl)
	}
	var page apiv1.MessagePage
	adminJSON(t, base, "GET", "/api/v1/deadletters/redrive-cg/messages?limit=10", nil, &page)
	if len(page.Messages) != 3 || page.Messages[0].Origin != "redrive-work" {
		t.Fatalf("dead letter page %+v", page)
	}

	// Two of them back to their origin topic.
	var res apiv1.RedriveResult
	if code := adminJSON(t, base, "POST", "/api/v1/deadletters/redrive-cg/redrive", apiv1.Redrive{Offsets: []int64{0, 2}}, &res); code != 200 || res.Redriven != 2 || res.Next != 3 {
		t.Fatalf("re-drive: %d %+v", code, res)
	}
	var topic apiv1.TopicDetail
	adminJSON(t, base, "GET", "/api/v1/topics/redrive-work", nil, &topic)
	if topic.Messages != 5 {
		t.Fatalf("origin topic holds %d messages after re-driving 2 of 3", topic.Messages)
	}
	body0 := page.Messages[0].Body
	var found []apiv1.MessageView
	adminJSON(t, base, "GET", "/api/v1/messages?topic=redrive-work&key=task-key-"+body0[len("task"):], nil, &found)
	if len(found) != 2 {
		t.Fatalf("key of a re-driven message finds %d copies, want the original and the re-driven one: %+v", len(found), found)
	}
	for _, m := range found {
		if m.Tags != "urgent" || m.Body != body0 {
			t.Errorf("re-driven copy %+v", m)
		}
	}
	// All of them to the group's retry topic.
	if code := adminJSON(t, base, "POST", "/api/v1/deadletters/redrive-cg/redrive", apiv1.Redrive{ToRetry: true}, &res); code != 200 || res.Redriven != 3 {
		t.Fatalf("re-drive to retry: %d %+v", code, res)
	}
	var e struct{ Error struct{ Code string } }
	if code := adminJSON(t, base, "POST", "/api/v1/deadletters/nobody/redrive", apiv1.Redrive{}, &e); code != 404 || e.Error.Code != "topic_not_found" {
		t.Errorf("re-drive of a group without dead letters: %d %+v", code, e)
	}
}
