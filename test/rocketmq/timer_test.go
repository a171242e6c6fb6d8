package rocketmq_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestTimerMessages: messages sent with a delivery time (the Go client's
// WithDelayTimestamp, TIMER_DELIVER_MS) or a delay (TIMER_DELAY_SEC,
// TIMER_DELAY_MS) reach a push consumer no earlier than due, and one still
// pending when the broker restarts arrives after it.
func TestTimerMessages(t *testing.T) {
	t.Parallel()
	cfg := apptest.TestConfig(t.TempDir())
	n := apptest.StartTestNode(t, cfg)
	p := startProducer(t, n.RemotingAddr(), "timer-pg")
	ctx := context.Background()
	if _, err := p.SendSync(ctx, primitive.NewMessage("timers", []byte("now"))); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	due := map[string]time.Time{}
	send := func(body string, m *primitive.Message, at time.Time) {
		t.Helper()
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatal(err)
		}
		due[body] = at
	}
	at := sent.Add(2 * time.Second)
	send("deliver-at", primitive.NewMessage("timers", []byte("deliver-at")).WithDelayTimestamp(at), at)
	m := primitive.NewMessage("timers", []byte("delay-sec"))
	m.WithProperty("TIMER_DELAY_SEC", "3")
	send("delay-sec", m, sent.Add(3*time.Second))
	m = primitive.NewMessage("timers", []byte("delay-ms"))
	m.WithProperty("TIMER_DELAY_MS", "1500")
	send("delay-ms", m, sent.Add(1500*time.Millisecond))
	m = primitive.NewMessage("timers", []byte("after-restart"))
	m.WithProperty("TIMER_DELAY_SEC", "6")
	send("after-restart", m, sent.Add(6*time.Second))
	n.Stop(t)
	n = apptest.StartTestNode(t, cfg)

	var mu sync.Mutex
	got := map[string]time.Time{}
	startConsumer(t, n.RemotingAddr(), "timer-cg", "timers", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if _, ok := got[string(m.Body)]; !ok {
					got[string(m.Body)] = time.Now()
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	eventually(t, 30*time.Second, "every timer message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != len(due)+1 && time.Since(sent) > 25*time.Second {
			t.Logf("got %v", got)
		}
		return len(got) == len(due)+1
	})
	mu.Lock()
	defer mu.Unlock()
	for body, want := range due {
		// A message that fell due while the broker was stopped arrives
		// when it is back; none arrives early.
		if got[body].Before(want) {
			t.Errorf("%s arrived %v before it was due", body, want.Sub(got[body]))
		}
	}
}

// TestRecallMessage: a timer message's send answers a recall handle;
// RECALL_MESSAGE with it cancels the message (never delivered), and a
// second recall fails; the admin API cancels another by id.
func TestRecallMessage(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "recallable", 1)
	send := func(id string) *protocol.Command {
		r := call(t, addr, &protocol.Command{Code: protocol.SendMessage, Body: []byte(id), ExtFields: protocol.FieldsOf(map[string]string{
			"producerGroup": "recall-pg", "topic": "recallable", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
			"properties": "UNIQ_KEY\x01" + id + "\x02TIMER_DELAY_MS\x011500\x02"})})
		if r.Code != protocol.Success || r.Ext("recallHandle") == "" {
			t.Fatalf("send %s: %d %s %v", id, r.Code, r.Remark, r.ExtFields)
		}
		return r
	}
	recalled := send("RECALLED0000000000000000000000001")
	send("KEPT00000000000000000000000000001")
	send("CANCELLED000000000000000000000001")
	// The admin API cancels by id.
	cancel := func() int {
		req, _ := http.NewRequest(http.MethodDelete, "http://"+n.App.Addr("http")+"/api/v1/timers/CANCELLED000000000000000000000001?topic=recallable", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := cancel(); code != http.StatusNoContent {
		t.Fatalf("admin cancel: HTTP %d", code)
	}
	if code := cancel(); code != http.StatusNotFound {
		t.Fatalf("second admin cancel: HTTP %d", code)
	}
	recall := func() *protocol.Command {
		return call(t, addr, &protocol.Command{Code: protocol.RecallMessage, ExtFields: protocol.FieldsOf(map[string]string{
			"producerGroup": "recall-pg", "topic": "recallable", "recallHandle": recalled.Ext("recallHandle")})})
	}
	if r := recall(); r.Code != protocol.Success || r.Ext("msgId") != "RECALLED0000000000000000000000001" {
		t.Fatalf("recall: %d %s %v", r.Code, r.Remark, r.ExtFields)
	}
	if r := recall(); r.Code == protocol.Success {
		t.Fatal("a second recall succeeded")
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.RecallMessage, ExtFields: protocol.FieldsOf(map[string]string{
		"topic": "recallable", "recallHandle": "not-a-handle"})}); r.Code != protocol.InvalidParameter {
		t.Fatalf("bad handle: %d", r.Code)
	}
	pull := &protocol.Command{Code: protocol.PullMessage, ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "recall-g",
		"topic": "recallable", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "6",
		"suspendTimeoutMillis": "5000", "subscription": "*", "expressionType": "TAG"})}
	r := call(t, addr, pull)
	msgs := primitive.DecodeMessage(r.Body)
	if r.Code != protocol.Success || len(msgs) != 1 || string(msgs[0].Body) != "KEPT00000000000000000000000000001" {
		t.Fatalf("pull: %d, %d messages", r.Code, len(msgs))
	}
	time.Sleep(300 * time.Millisecond)
	pull.SetExt("queueOffset", "1")
	pull.SetExt("suspendTimeoutMillis", "500")
	if r := call(t, addr, pull); r.Code != protocol.PullNotFound {
		t.Fatalf("a recalled or cancelled message arrived: %d", r.Code)
	}
}
