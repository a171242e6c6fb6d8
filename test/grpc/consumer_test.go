//go:build !race

package grpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

func startSimpleConsumer(t *testing.T, addr, group, topic string) rmq.SimpleConsumer {
	t.Helper()
	cfg := config(addr)
	cfg.ConsumerGroup = group
	sc, err := rmq.NewSimpleConsumer(cfg, rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.GracefulStop() })
	return sc
}

// receive polls a simple consumer once; "no new message" is an empty result.
func receive(t *testing.T, sc rmq.SimpleConsumer, n int32, invisible time.Duration) []*rmq.MessageView {
	t.Helper()
	mvs, err := sc.Receive(context.Background(), n, invisible)
	var es *rmq.ErrRpcStatus
	if errors.As(err, &es) && es.Code == 40401 {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return mvs
}

// TestSimpleConsumerReceivesAndAcks: 10,000 messages sent by gRPC and by a
// Kafka producer are received and acknowledged by two SimpleConsumers of
// one group: each exactly once.
func TestSimpleConsumerReceivesAndAcks(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, total = "grpc-pop", 10_000
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	ctx := context.Background()
	for i := range total / 2 {
		if _, err := p.Send(ctx, &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("grpc-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for i := range total / 2 {
		kc.Produce(ctx, kgo.StringRecord(fmt.Sprintf("kafka-%d", i)), nil)
	}
	if err := kc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for c := range 2 {
		sc := startSimpleConsumer(t, n.GRPCAddr(), "pop-group", topic)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(got) >= total
				mu.Unlock()
				if done {
					return
				}
				for _, mv := range receive(t, sc, 32, 20*time.Second) {
					if err := sc.Ack(ctx, mv); err != nil {
						t.Errorf("consumer %d ack: %v", c, err)
						return
					}
					mu.Lock()
					got[string(mv.GetBody())]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != total {
		t.Fatalf("%d of %d messages received", len(got), total)
	}
	for body, c := range got {
		if c != 1 {
			t.Fatalf("%s received %d times", body, c)
		}
	}
}

// TestUnackedMessageReappears: a message received and not acknowledged
// comes back after its invisible time with attempt 2; a changed invisible
// duration postpones it; past the group's attempts it goes to the DLQ.
func TestUnackedMessageReappears(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic = "grpc-redeliver"
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	if _, err := p.Send(context.Background(), &rmq.Message{Topic: topic, Body: []byte("again")}); err != nil {
		t.Fatal(err)
	}
	sc := startSimpleConsumer(t, n.GRPCAddr(), "redeliver-group", topic)
	var first *rmq.MessageView
	eventually(t, 10*time.Second, "the message", func() bool {
		if mvs := receive(t, sc, 1, 10*time.Second); len(mvs) == 1 {
			first = mvs[0]
		}
		return first != nil
	})
	if first.GetDeliveryAttempt() != 1 {
		t.Fatalf("first attempt %d", first.GetDeliveryAttempt())
	}
	if mvs := receive(t, sc, 1, 10*time.Second); len(mvs) != 0 {
		t.Fatal("message visible while in flight")
	}
	start := time.Now()
	var second *rmq.MessageView
	eventually(t, 20*time.Second, "the message again", func() bool {
		if mvs := receive(t, sc, 1, 10*time.Second); len(mvs) == 1 {
			second = mvs[0]
		}
		return second != nil
	})
	if second.GetDeliveryAttempt() != 2 || string(second.GetBody()) != "again" {
		t.Fatalf("second delivery: attempt %d", second.GetDeliveryAttempt())
	}
	t.Logf("redelivered %v after the second receive started", time.Since(start))
	resp, err := http.Get("http://" + n.App.Addr("http") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `rosetta_pop_redelivered_total{group="redeliver-group"} 1`) ||
		!strings.Contains(string(metrics), `rosetta_pop_in_flight{group="redeliver-group"} 1`) {
		t.Errorf("POP metrics missing:\n%s", metrics)
	}
	// Postponed: not back within its original invisible time.
	if err := sc.ChangeInvisibleDuration(second, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(11 * time.Second)
	if mvs := receive(t, sc, 1, 10*time.Second); len(mvs) != 0 {
		t.Fatalf("postponed message back after %v", time.Since(start))
	}
	if err := sc.Ack(context.Background(), second); err != nil {
		t.Fatal(err)
	}
}

// TestPopStateSurvivesRestart: after a broker restart, acknowledged
// messages never come back and unacknowledged ones come back once their
// invisible time passes, with attempt 2.
func TestPopStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := apptest.TestConfig(t.TempDir())
	n := apptest.StartTestNode(t, cfg)
	const topic = "grpc-restart"
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	for i := range 20 {
		if _, err := p.Send(context.Background(), &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint("r", i))}); err != nil {
			t.Fatal(err)
		}
	}
	sc := startSimpleConsumer(t, n.GRPCAddr(), "restart-group", topic)
	acked, held := map[string]bool{}, map[string]bool{}
	// heldFrom is when the receive that handed a held message out began:
	// its invisible time cannot end before heldFrom + 10 s.
	heldFrom := map[string]time.Time{}
	eventually(t, 20*time.Second, "every message once", func() bool {
		asked := time.Now()
		for _, mv := range receive(t, sc, 32, 10*time.Second) {
			if len(acked) < 10 {
				if err := sc.Ack(context.Background(), mv); err != nil {
					t.Fatal(err)
				}
				acked[string(mv.GetBody())] = true
			} else {
				held[string(mv.GetBody())] = true
				heldFrom[string(mv.GetBody())] = asked
			}
		}
		return len(acked)+len(held) == 20
	})
	_ = sc.GracefulStop()
	n.Stop(t)
	n = apptest.StartTestNode(t, cfg)
	sc = startSimpleConsumer(t, n.GRPCAddr(), "restart-group", topic)
	again := map[string]int32{}
	eventually(t, 40*time.Second, "the unacknowledged messages again", func() bool {
		for _, mv := range receive(t, sc, 32, 10*time.Second) {
			if from, ok := heldFrom[string(mv.GetBody())]; ok && time.Since(from) < 10*time.Second {
				t.Errorf("%s back %v after the receive that handed it out began, before its invisible time (10 s)",
					mv.GetBody(), time.Since(from).Round(time.Millisecond))
			}
			again[string(mv.GetBody())] = mv.GetDeliveryAttempt()
			if err := sc.Ack(context.Background(), mv); err != nil {
				t.Fatal(err)
			}
		}
		return len(again) >= len(held)
	})
	for body, attempt := range again {
		if acked[body] || !held[body] || attempt != 2 {
			t.Errorf("%s back (attempt %d): acked %v held %v", body, attempt, acked[body], held[body])
		}
	}
}

// TestMaxAttemptsDeadLetter: a message never acknowledged by a group whose
// retryMaxTimes is 1 is received twice, then moved to %DLQ%<group>.
func TestMaxAttemptsDeadLetter(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, group = "grpc-dlq", "dlq-group"
	cfg := broker.DefaultGroupConfig(group)
	cfg.RetryMaxTimes = 1
	if err := n.App.Broker().SetGroupConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	if _, err := p.Send(context.Background(), &rmq.Message{Topic: topic, Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	sc := startSimpleConsumer(t, n.GRPCAddr(), group, topic)
	var attempts []int32
	dlq, _ := model.ParseTopicName("%DLQ%" + group)
	eventually(t, 60*time.Second, "the message in the dead-letter topic", func() bool {
		for _, mv := range receive(t, sc, 1, 10*time.Second) {
			attempts = append(attempts, mv.GetDeliveryAttempt())
		}
		if _, err := n.App.Broker().Topic(dlq); err != nil {
			return false
		}
		res, err := n.App.Broker().Read(dlq, 0, 0, broker.ReadOptions{})
		if err != nil {
			return false
		}
		defer res.Release()
		return len(res.Records) == 1
	})
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Fatalf("attempts %v, want [1 2]", attempts)
	}
}

// TestVanishedConsumerDoesNotBlockOthers: a consumer that receives messages
// and goes away without acknowledging them holds nothing else back; its
// messages reach another consumer of the group once their invisible time
// ends.
func TestVanishedConsumerDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic = "grpc-vanish"
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	for i := range 20 {
		if _, err := p.Send(context.Background(), &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint("v", i))}); err != nil {
			t.Fatal(err)
		}
	}
	gone := startSimpleConsumer(t, n.GRPCAddr(), "vanish-group", topic)
	var taken []*rmq.MessageView
	eventually(t, 20*time.Second, "the first consumer's messages", func() bool {
		taken = append(taken, receive(t, gone, 5-int32(len(taken)), 10*time.Second)...)
		return len(taken) == 5
	})
	_ = gone.GracefulStop()
	vanished := time.Now()
	other := startSimpleConsumer(t, n.GRPCAddr(), "vanish-group", topic)
	got := map[string]time.Duration{}
	eventually(t, 40*time.Second, "every message at the other consumer", func() bool {
		for _, mv := range receive(t, other, 32, 10*time.Second) {
			got[string(mv.GetBody())] = time.Since(vanished)
			if err := other.Ack(context.Background(), mv); err != nil {
				t.Fatal(err)
			}
		}
		return len(got) == 20
	})
	for _, mv := range taken {
		if got[string(mv.GetBody())] < 5*time.Second {
			t.Errorf("%s back %v after the consumer went, before its invisible time", mv.GetBody(), got[string(mv.GetBody())])
		}
	}
}
