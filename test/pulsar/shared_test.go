package pulsar_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// produce sends n messages "<prefix><i>" and waits for every receipt.
func produce(t testing.TB, c pulsar.Client, topic, prefix string, n int, opts ...func(*pulsar.ProducerMessage)) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for i := range n {
		m := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(prefix, i)), Key: fmt.Sprint("key-", i%10)}
		for _, o := range opts {
			o(m)
		}
		wg.Add(1)
		p.SendAsync(context.Background(), m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestSharedSpreadsAndHandsOver: three Shared consumers split a topic's
// messages, each acknowledged message delivered once; the messages a
// consumer held when it closed without acknowledging go to the others,
// with their redelivery count raised.
func TestSharedSpreadsAndHandsOver(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic, total = "pulsar-shared", 600
	sub := func(name string, queue int) pulsar.Consumer {
		co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "workers", Name: name, Type: pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: queue})
		if err != nil {
			t.Fatal(err)
		}
		return co
	}
	// A consumer that takes messages and never acknowledges them.
	quitter := sub("quitter", 50)
	produce(t, c, topic, "m", total)
	held := map[string]bool{}
	for range 20 {
		held[string(receive(t, quitter, 10*time.Second).Payload())] = true
	}
	a, b := sub("a", 100), sub("b", 100)
	defer a.Close()
	defer b.Close()
	quitter.Close()

	var mu sync.Mutex
	seen := map[string]int{}
	per := map[string]int{}
	again := 0
	var wg sync.WaitGroup
	for _, co := range []pulsar.Consumer{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				m, err := co.Receive(ctx)
				cancel()
				if err != nil {
					return
				}
				mu.Lock()
				seen[string(m.Payload())]++
				per[co.Name()]++
				if m.RedeliveryCount() > 0 {
					again++
					delete(held, string(m.Payload()))
				}
				mu.Unlock()
				if err := co.Ack(m); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != total {
		t.Fatalf("%d distinct messages of %d", len(seen), total)
	}
	for p, k := range seen {
		if k != 1 {
			t.Fatalf("%s delivered %d times", p, k)
		}
	}
	if per["a"] == 0 || per["b"] == 0 {
		t.Fatalf("not spread over the consumers: %v", per)
	}
	// The quitter held what it received and what its receiver queue had
	// prefetched (50, and more permits as it consumed).
	if len(held) > 0 || again > 100 {
		t.Fatalf("%d messages redelivered; of those the quitter received, not redelivered: %v", again, held)
	}
}

// TestNegativeAckAndDeadLetter: a negatively acknowledged message comes
// back with its redelivery count raised, and after MaxDeliveries the
// client's dead-letter policy moves it to the DLQ topic, where a consumer
// reads it.
func TestNegativeAckAndDeadLetter(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic = "pulsar-nack"
	dlq := topic + "-dlq"
	co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 100 * time.Millisecond,
		DLQ: &pulsar.DLQPolicy{MaxDeliveries: 3, DeadLetterTopic: dlq}})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	dead, err := c.Subscribe(pulsar.ConsumerOptions{Topic: dlq, SubscriptionName: "dead", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	produce(t, c, topic, "poison-", 1)
	var counts []uint32
	for range 3 {
		m := receive(t, co, 10*time.Second)
		counts = append(counts, m.RedeliveryCount())
		co.Nack(m)
	}
	if fmt.Sprint(counts) != "[0 1 2]" {
		t.Fatalf("redelivery counts %v, want [0 1 2]", counts)
	}
	m := receive(t, dead, 20*time.Second)
	if string(m.Payload()) != "poison-0" {
		t.Fatalf("dead letter %q", m.Payload())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if m, err := co.Receive(ctx); err == nil {
		t.Fatalf("delivered again after dead-lettering: %q (count %d)", m.Payload(), m.RedeliveryCount())
	}
}

// TestDelayedDelivery: a message sent with DeliverAfter reaches a Shared
// consumer no sooner than asked, while an undelayed one arrives at once.
func TestDelayedDelivery(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic = "pulsar-delayed"
	co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	start := time.Now()
	produce(t, c, topic, "later-", 1, func(m *pulsar.ProducerMessage) { m.DeliverAfter = 2 * time.Second })
	produce(t, c, topic, "now-", 1)
	first := receive(t, co, 10*time.Second)
	if string(first.Payload()) != "now-0" {
		t.Fatalf("first delivered %q", first.Payload())
	}
	second := receive(t, co, 10*time.Second)
	if string(second.Payload()) != "later-0" || time.Since(start) < 2*time.Second {
		t.Fatalf("delayed message %q after %v", second.Payload(), time.Since(start))
	}
	_ = co.Ack(first)
	_ = co.Ack(second)
}

// TestKeyShared: AUTO_SPLIT consumers each get whole keys, in order per
// key; STICKY consumers get the keys of the hash ranges they declared.
func TestKeyShared(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	for _, mode := range []string{"auto", "sticky"} {
		topic := "pulsar-key-shared-" + mode
		var consumers []pulsar.Consumer
		for i := range 3 {
			policy := &pulsar.KeySharedPolicy{Mode: pulsar.KeySharedPolicyModeAutoSplit}
			if mode == "sticky" {
				ranges := [][]int{{0, 20000}, {20001, 40000}, {40001, 65535}}[i]
				var err error
				if policy, err = pulsar.NewKeySharedPolicySticky(ranges); err != nil {
					t.Fatal(err)
				}
			}
			co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "keys", Name: fmt.Sprint("c", i),
				Type: pulsar.KeyShared, KeySharedPolicy: policy, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			defer co.Close()
			consumers = append(consumers, co)
		}
		const keys, each = 30, 20
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range keys * each {
			wg.Add(1)
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Key: fmt.Sprint("key-", i%keys), Payload: []byte(fmt.Sprint(i / keys))},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer wg.Done()
					if err != nil {
						t.Errorf("send: %v", err)
					}
				})
		}
		wg.Wait()
		p.Close()
		var mu sync.Mutex
		owner := map[string]int{}
		next := map[string]int{}
		got := 0
		var cw sync.WaitGroup
		for ci, co := range consumers {
			cw.Add(1)
			go func() {
				defer cw.Done()
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					m, err := co.Receive(ctx)
					cancel()
					if err != nil {
						return
					}
					mu.Lock()
					if o, ok := owner[m.Key()]; ok && o != ci {
						t.Errorf("%s: %s went to consumers %d and %d", mode, m.Key(), o, ci)
					}
					owner[m.Key()] = ci
					if string(m.Payload()) != fmt.Sprint(next[m.Key()]) {
						t.Errorf("%s: %s: got %s, want %d", mode, m.Key(), m.Payload(), next[m.Key()])
					}
					next[m.Key()]++
					got++
					mu.Unlock()
					_ = co.Ack(m)
				}
			}()
		}
		cw.Wait()
		used := map[int]bool{}
		for _, o := range owner {
			used[o] = true
		}
		if got != keys*each || len(used) < 2 {
			t.Fatalf("%s: %d of %d messages, over %d consumers", mode, got, keys*each, len(used))
		}
	}
}

// TestSharedUnsubscribeStartsAfresh: a Shared subscription unsubscribed
// and made again under its name starts at its initial position, not where
// the old one was.
func TestSharedUnsubscribeStartsAfresh(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic = "pulsar-unsubscribe"
	sub := func() pulsar.Consumer {
		co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "again", Type: pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true})
		if err != nil {
			t.Fatal(err)
		}
		return co
	}
	co := sub()
	produce(t, c, topic, "u", 5)
	for range 5 {
		if err := co.Ack(receive(t, co, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if err := co.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	co.Close()
	co = sub()
	defer co.Close()
	got := map[string]bool{}
	for len(got) < 5 {
		m := receive(t, co, 10*time.Second)
		got[string(m.Payload())] = true
		_ = co.Ack(m)
	}
}
