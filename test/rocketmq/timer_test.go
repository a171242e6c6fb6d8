package rocketmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestTimerMessages: messages sent with a delivery time (the Go client's
// WithDelayTimestamp, TIMER_DELIVER_MS) or a delay (TIMER_DELAY_SEC,
// TIMER_DELAY_MS) reach a push consumer no earlier than due, and one still
// pending when the broker restarts arrives after it.
func TestTimerMessages(t *testing.T) {
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
