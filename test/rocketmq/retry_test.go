package rocketmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestRetryAndDeadLetter: a consumer that keeps failing gets each message
// back through the group's retry topic after the delay level it asks for,
// with the reconsume count raised and the original topic restored, and after
// maxReconsumeTimes the message lands in the group's dead-letter topic.
func TestRetryAndDeadLetter(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "retry-pg")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const total = 5
	for i := 0; i < total; i++ {
		if _, err := p.SendSync(ctx, primitive.NewMessage("work", []byte(fmt.Sprintf("job%d", i)))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	attempts := map[string][]int32{}
	startConsumer(t, addr, "cg-retry", "work", consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		cc, _ := primitive.GetConcurrentlyCtx(ctx)
		cc.DelayLevelWhenNextConsume = 1 // retry after 1 s
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if m.Topic != "work" {
				t.Errorf("retried message shows topic %q", m.Topic)
			}
			attempts[string(m.Body)] = append(attempts[string(m.Body)], m.ReconsumeTimes)
		}
		return consumer.ConsumeRetryLater, nil
	}, consumer.WithMaxReconsumeTimes(2))
	eventually(t, 45*time.Second, "three attempts of every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < total; i++ {
			if len(attempts[fmt.Sprintf("job%d", i)]) < 3 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	for body, a := range attempts {
		if len(a) != 3 || a[0] != 0 || a[1] != 1 || a[2] != 2 {
			t.Fatalf("%s: reconsume counts %v, want [0 1 2]", body, a)
		}
	}
	mu.Unlock()
	dead := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, addr, "dlq-reader", "%DLQ%cg-retry", "*", dead)
	eventually(t, 30*time.Second, "every message in the dead-letter topic", func() bool { return dead.count() == total })
}

// TestDelayLevelSend: a message sent with delay level 2 (5 s) reaches its
// consumer no sooner than that, and without the DELAY property.
func TestDelayLevelSend(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	p := startProducer(t, n.RemotingAddr(), "delay-pg")
	// A first, undelayed message creates the topic the consumer subscribes to.
	if _, err := p.SendSync(context.Background(), primitive.NewMessage("delayed", []byte("now"))); err != nil {
		t.Fatal(err)
	}
	got := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, n.RemotingAddr(), "delay-cg", "delayed", "*", got)
	m := primitive.NewMessage("delayed", []byte("later"))
	m.WithDelayTimeLevel(2)
	sent := time.Now()
	if _, err := p.SendSync(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the delayed message", func() bool { return got.count() == 2 })
	if took := time.Since(sent); took < 4900*time.Millisecond {
		t.Fatalf("delivered after %v, before its 5 s level", took)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if d := got.seen["later"].GetProperty("DELAY"); d != "" {
		t.Fatalf("delivered with DELAY=%s", d)
	}
}

// TestDelayedSurvivesRestart: a delayed message pending when the broker
// stops is still delivered, on time, after it restarts.
func TestDelayedSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := apptest.TestConfig(dir)
	n := apptest.StartTestNode(t, cfg)
	p := startProducer(t, n.RemotingAddr(), "restart-pg")
	if _, err := p.SendSync(context.Background(), primitive.NewMessage("persisted", []byte("now"))); err != nil {
		t.Fatal(err)
	}
	m := primitive.NewMessage("persisted", []byte("after restart"))
	m.WithDelayTimeLevel(2)
	sent := time.Now()
	if _, err := p.SendSync(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	_ = p.Shutdown()
	n.Stop(t)

	n2 := apptest.StartTestNode(t, cfg)
	got := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, n2.RemotingAddr(), "restart-cg", "persisted", "*", got)
	eventually(t, 30*time.Second, "the delayed message after the restart", func() bool { return got.count() == 2 })
	if took := time.Since(sent); took < 4900*time.Millisecond {
		t.Fatalf("delivered after %v, before its 5 s level", took)
	}
}
