//go:build !race

package grpc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestProducerSendsEveryType: the v5 producer sends normal messages (tag,
// keys, properties), FIFO messages of several groups, delayed messages and
// transactional ones (commit, rollback, and one left open that the
// broker's orphan recovery resolves through the client's checker); a Kafka
// consumer of the topic sees each committed message once, FIFO groups in
// order, delayed ones no earlier than due, rolled-back ones never.
func TestProducerSendsEveryType(t *testing.T) {
	t.Parallel()
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Broker.TransactionTimeout = time.Second
	cfg.Broker.TransactionCheckInterval = time.Second
	n := apptest.StartTestNode(t, cfg)
	const topic = "grpc-all"
	var mu sync.Mutex
	checked := map[string]int{}
	p := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic), rmq.WithTransactionChecker(&rmq.TransactionChecker{
		Check: func(m *rmq.MessageView) rmq.TransactionResolution {
			mu.Lock()
			checked[string(m.GetBody())]++
			mu.Unlock()
			return rmq.COMMIT
		}}))
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 50 {
		m := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("normal-%d", i))}
		m.SetTag("T")
		m.SetKeys(fmt.Sprintf("k%d", i), "shared")
		m.AddProperty("p", "v")
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		want[string(m.Body)] = true
	}
	for i := range 40 {
		m := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("fifo-g%d-%02d", i%4, i/4))}
		m.SetMessageGroup(fmt.Sprintf("g%d", i%4))
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		want[string(m.Body)] = true
	}
	// Delivery times are milliseconds on the wire and in the broker: a
	// message is due at the millisecond it names.
	due := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	for i := range 3 {
		m := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("delay-%d", i))}
		m.SetDelayTimestamp(due)
		r, err := p.Send(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if r[0].RecallHandle == "" {
			t.Fatalf("delayed send without a recall handle: %+v", r[0])
		}
		want[string(m.Body)] = true
	}
	for i, end := range []string{"commit", "rollback", "commit", "rollback", "orphan"} {
		tx := p.BeginTransaction()
		m := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("txn-%s-%d", end, i))}
		if _, err := p.SendWithTransaction(ctx, m, tx); err != nil {
			t.Fatal(err)
		}
		switch end {
		case "commit":
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			want[string(m.Body)] = true
		case "rollback":
			if err := tx.RollBack(); err != nil {
				t.Fatal(err)
			}
		default:
			want[string(m.Body)] = true // resolved by the checker
		}
	}

	got := map[string]int{}
	lastFifo := map[string]string{}
	var early []string
	kafkaRecords(t, n.KafkaAddr(), topic, len(want), 30*time.Second, func(r *kgo.Record) {
		body := string(r.Value)
		got[body]++
		if strings.HasPrefix(body, "fifo-") {
			g := body[5:7]
			if prev := lastFifo[g]; prev > body {
				t.Errorf("group %s out of order: %s after %s", g, body, prev)
			}
			lastFifo[g] = body
		}
		if strings.HasPrefix(body, "delay-") && time.Now().Before(due) {
			early = append(early, body)
		}
		if strings.HasPrefix(body, "normal-") {
			hs := map[string]string{}
			for _, h := range r.Headers {
				hs[h.Key] = string(h.Value)
			}
			if hs["p"] != "v" || hs["rocketmq.TAGS"] != "" && hs["rocketmq.TAGS"] != "T" || !strings.HasSuffix(string(r.Key), " shared") {
				t.Errorf("%s: key %q headers %v", body, r.Key, hs)
			}
		}
	})
	for body := range want {
		if got[body] != 1 {
			t.Errorf("%s delivered %d times", body, got[body])
		}
	}
	for body := range got {
		if !want[body] {
			t.Errorf("unexpected %s", body)
		}
	}
	if len(early) > 0 {
		t.Errorf("delivered before due: %v", early)
	}
	mu.Lock()
	defer mu.Unlock()
	if checked["txn-orphan-4"] != 1 || len(checked) != 1 {
		t.Errorf("checker calls: %v", checked)
	}
}
