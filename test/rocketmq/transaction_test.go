package rocketmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/model"
)

// txnListener decides local transactions by message body: "commit-…" and
// "rollback-…" at once, anything else unknown until checked, when check
// decides it.
type txnListener struct {
	mu      sync.Mutex
	checked map[string]int
	check   func(body string) primitive.LocalTransactionState
}

func (l *txnListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch body := string(m.Body); {
	case len(body) >= 6 && body[:6] == "commit":
		return primitive.CommitMessageState
	case len(body) >= 8 && body[:8] == "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *txnListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checked[string(m.Body)]++
	return l.check(string(m.Body))
}

func always(s primitive.LocalTransactionState) func(string) primitive.LocalTransactionState {
	return func(string) primitive.LocalTransactionState { return s }
}

func (l *txnListener) checks(body string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checked[body]
}

func startTxnProducer(t *testing.T, addr, group string, l *txnListener) rocketmq.TransactionProducer {
	t.Helper()
	p, err := rocketmq.NewTransactionProducer(l, producerOptions(addr, group)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

func txnConfig(t *testing.T) app.Config {
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Broker.TransactionTimeout = time.Second
	cfg.Broker.TransactionCheckInterval = time.Second
	return cfg
}

// collect starts a push consumer of topic and returns what it received.
// settledMessages waits until no half message is pending, then returns
// how many messages the topic holds.
func settledMessages(t *testing.T, n *apptest.TestNode, topic string) int64 {
	t.Helper()
	b := n.App.Broker()
	eventually(t, 30*time.Second, "no pending half message", func() bool { return b.TxnStats().Pending == 0 })
	name, err := model.ParseTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	top, err := b.Topic(name)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, q := range top.Queues {
		start, _, end, err := b.Engine().Offsets(q)
		if err != nil {
			t.Fatal(err)
		}
		total += int64(end - start)
	}
	return total
}

func collect(t *testing.T, addr, group, topic string) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	startConsumer(t, addr, group, topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				got[string(m.Body)]++
				if m.GetProperty("TRAN_MSG") != "" || m.GetProperty("REAL_TOPIC") != "" {
					t.Errorf("delivered with transaction properties: %v", m.GetProperties())
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]int, len(got))
		for k, v := range got {
			out[k] = v
		}
		return out
	}
}

// TestTransactionProducer: with the Go TransactionProducer, a committed
// message is delivered, a rolled-back one never is, and one left unknown
// is resolved through the broker's check-back (commit → delivered,
// rollback → never), each exactly once.
func TestTransactionProducer(t *testing.T) {
	n := apptest.StartTestNode(t, txnConfig(t))
	createTopic(t, n.RemotingAddr(), "txn-orders", 4)
	l := &txnListener{checked: map[string]int{}, check: always(primitive.CommitMessageState)}
	p := startTxnProducer(t, n.RemotingAddr(), "txn-pg", l)
	got := collect(t, n.RemotingAddr(), "txn-cg", "txn-orders")
	ctx := context.Background()
	want := map[string]int{}
	for i := range 20 {
		for _, kind := range []string{"commit", "rollback", "unknown"} {
			body := fmt.Sprintf("%s-%d", kind, i)
			res, err := p.SendMessageInTransaction(ctx, primitive.NewMessage("txn-orders", []byte(body)).WithKeys([]string{body}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != primitive.SendOK {
				t.Fatalf("send %s: %+v", body, res)
			}
			if kind != "rollback" {
				want[body] = 1
			}
		}
	}
	eventually(t, 30*time.Second, "committed and checked messages", func() bool { return len(got()) >= len(want) })
	if stored := settledMessages(t, n, "txn-orders"); stored != int64(len(want)) { // so no more arrive
		t.Fatalf("%d messages in the topic, want %d", stored, len(want))
	}
	if g := got(); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("delivered %v\nwant %v", g, want)
	}
	for i := range 20 {
		if c := l.checks(fmt.Sprintf("unknown-%d", i)); c != 1 {
			t.Errorf("unknown-%d checked %d times", i, c)
		}
		if c := l.checks(fmt.Sprintf("commit-%d", i)); c != 0 {
			t.Errorf("commit-%d checked %d times", i, c)
		}
	}
}

// TestHalfMessageAcrossRestart: a half message pending when the broker
// stops is checked after it restarts and, committed then, delivered once;
// one committed before the stop is delivered once; one rolled back by its
// check never is.
func TestHalfMessageAcrossRestart(t *testing.T) {
	t.Parallel()
	cfg := txnConfig(t)
	cfg.Broker.TransactionTimeout = 3 * time.Second
	n := apptest.StartTestNode(t, cfg)
	createTopic(t, n.RemotingAddr(), "txn-restart", 4)
	ctx := context.Background()
	l := &txnListener{checked: map[string]int{}, check: always(primitive.UnkonwnState)}
	p := startTxnProducer(t, n.RemotingAddr(), "txn-restart-pg", l)
	for _, body := range []string{"commit-before", "pending", "pending-rollback"} {
		if _, err := p.SendMessageInTransaction(ctx, primitive.NewMessage("txn-restart", []byte(body))); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Shutdown()
	n.Stop(t)

	n = apptest.StartTestNode(t, cfg)
	l2 := &txnListener{checked: map[string]int{}, check: func(body string) primitive.LocalTransactionState {
		if body == "pending-rollback" {
			return primitive.RollbackMessageState
		}
		return primitive.CommitMessageState
	}}
	p = startTxnProducer(t, n.RemotingAddr(), "txn-restart-pg", l2)
	// The restarted producer sends again, so it heartbeats to this broker
	// (the Go client only knows brokers of topics it sends to).
	if _, err := p.SendMessageInTransaction(ctx, primitive.NewMessage("txn-restart", []byte("commit-after"))); err != nil {
		t.Fatal(err)
	}
	got := collect(t, n.RemotingAddr(), "txn-restart-cg", "txn-restart")
	eventually(t, 30*time.Second, "the pending message, committed by check-back", func() bool { return got()["pending"] == 1 })
	if stored := settledMessages(t, n, "txn-restart"); stored != 3 { // so no more arrive
		t.Fatalf("%d messages in the topic, want 3", stored)
	}
	g := got()
	if g["commit-before"] != 1 || g["pending"] != 1 || g["commit-after"] != 1 || len(g) != 3 {
		t.Fatalf("delivered %v", g)
	}
	if l2.checks("pending-rollback") != 1 || l2.checks("commit-before") != 0 {
		t.Fatalf("checks after the restart: %v", l2.checked)
	}
}
