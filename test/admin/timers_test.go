package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestPendingTimers: timer and delayed messages a RocketMQ producer sent
// are listed, the earliest first, per topic; cancelling one by its message
// id takes it off the list, and it is never delivered.
func TestPendingTimers(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	base := "http://" + n.HTTPAddr()
	ctx := context.Background()
	api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "reminders", "queues": 1}, nil)
	api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "other", "queues": 1}, nil)

	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("timers-pg"), producer.WithInstanceName("timers"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	send := func(topic, body string, set func(*primitive.Message)) string {
		t.Helper()
		m := primitive.NewMessage(topic, []byte(body)).WithTag("t-" + body)
		set(m)
		res, err := p.SendSync(ctx, m)
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %s: %v %v", body, res, err)
		}
		return res.MsgID
	}
	hour := send("reminders", "in an hour", func(m *primitive.Message) { m.WithProperty("TIMER_DELAY_SEC", "3600") })
	minute := send("reminders", "in a minute", func(m *primitive.Message) { m.WithProperty("TIMER_DELAY_SEC", "60") })
	level := send("reminders", "level 16", func(m *primitive.Message) { m.WithDelayTimeLevel(16) }) // 30 minutes
	send("other", "elsewhere", func(m *primitive.Message) { m.WithProperty("TIMER_DELAY_SEC", "120") })

	var got apiv1.PendingTimers
	if code := api(t, base, "GET", "/api/v1/timers?topic=reminders", nil, &got); code != http.StatusOK {
		t.Fatalf("list: %d", code)
	}
	var ids []string
	for _, tm := range got.Timers {
		ids = append(ids, tm.ID)
	}
	if len(ids) != 3 || ids[0] != minute || ids[1] != level || ids[2] != hour || got.More {
		t.Fatalf("pending on reminders: %+v", got)
	}
	if tm := got.Timers[1]; tm.DelayLevel != 16 || tm.Topic != "reminders" || tm.Tags != "t-level 16" ||
		time.Until(time.UnixMilli(tm.DueMillis)) < 29*time.Minute {
		t.Fatalf("the delayed message: %+v", tm)
	}
	if code := api(t, base, "GET", "/api/v1/timers?limit=1", nil, &got); code != http.StatusOK || len(got.Timers) != 1 || !got.More || got.Timers[0].ID != minute {
		t.Fatalf("the first of all: %d %+v", code, got)
	}

	if code := api(t, base, "DELETE", "/api/v1/timers/"+url.PathEscape(minute)+"?topic=reminders", nil, nil); code != http.StatusNoContent {
		t.Fatalf("cancel: %d", code)
	}
	if code := api(t, base, "DELETE", "/api/v1/timers/"+url.PathEscape(minute)+"?topic=reminders", nil, nil); code != http.StatusNotFound {
		t.Fatalf("cancel again: %d", code)
	}
	api(t, base, "GET", "/api/v1/timers?topic=reminders", nil, &got)
	if len(got.Timers) != 2 || got.Timers[0].ID != level {
		t.Fatalf("after cancelling: %+v", got)
	}
	if code := api(t, base, "GET", "/api/v1/timers?limit=0", nil, nil); code != http.StatusBadRequest {
		t.Fatalf("limit 0: %d", code)
	}
}
