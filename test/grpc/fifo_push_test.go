//go:build !race

package grpc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker"
)

// TestFIFOGroupsKeepOrder: 100 message groups × 50 messages sent FIFO are
// received by three SimpleConsumers of a FIFO group (consumeMessageOrderly)
// with each group's messages in order, each once.
func TestFIFOGroupsKeepOrder(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, groups, per = "grpc-fifo", 100, 50
	cfg := broker.DefaultGroupConfig("fifo-group")
	cfg.ConsumeMessageOrderly = true
	if err := n.App.Broker().SetGroupConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	ctx := context.Background()
	for i := range per {
		for g := range groups {
			m := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("g%03d-%02d", g, i))}
			m.SetMessageGroup(fmt.Sprintf("g%03d", g))
			if _, err := p.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	next := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	for range 3 {
		sc := startSimpleConsumer(t, n.GRPCAddr(), "fifo-group", topic)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				mu.Lock()
				done := total >= groups*per
				mu.Unlock()
				if done {
					return
				}
				for _, mv := range receive(t, sc, 16, 20*time.Second) {
					var g, i int
					fmt.Sscanf(string(mv.GetBody()), "g%03d-%02d", &g, &i)
					key := fmt.Sprintf("g%03d", g)
					mu.Lock()
					if next[key] != i {
						t.Errorf("group %s: got %d, want %d", key, i, next[key])
					}
					next[key] = i + 1
					total++
					mu.Unlock()
					if err := sc.Ack(ctx, mv); err != nil {
						t.Errorf("ack: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if total != groups*per {
		t.Fatalf("%d of %d received", total, groups*per)
	}
}

// TestPushConsumerConsumes: a v5 PushConsumer consumes every message with
// its listener; one listener failure is retried (attempt 2).
func TestPushConsumerConsumes(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, total = "grpc-push", 500
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	ctx := context.Background()
	for i := range total {
		if _, err := p.Send(ctx, &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint("push-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]int{}
	failedOnce := false
	cfg := config(n.GRPCAddr())
	cfg.ConsumerGroup = "push-group"
	pc, err := rmq.NewPushConsumer(cfg, rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
		rmq.WithPushAwaitDuration(2*time.Second),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			mu.Lock()
			defer mu.Unlock()
			if string(mv.GetBody()) == "push-7" && !failedOnce {
				failedOnce = true
				return rmq.FAILURE
			}
			got[string(mv.GetBody())]++
			if string(mv.GetBody()) == "push-7" && mv.GetDeliveryAttempt() != 2 {
				t.Errorf("retried with attempt %d", mv.GetDeliveryAttempt())
			}
			return rmq.SUCCESS
		}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.GracefulStop()
	eventually(t, 90*time.Second, "every message consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == total
	})
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	for body, c := range got {
		if c != 1 {
			t.Errorf("%s consumed %d times", body, c)
		}
	}
}
