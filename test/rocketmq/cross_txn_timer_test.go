package rocketmq_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// arrivalLog records when each body arrived and the message as delivered.
type arrivalLog struct {
	mu   sync.Mutex
	at   map[string]time.Time
	msgs map[string]*primitive.MessageExt
}

func (a *arrivalLog) collect(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range msgs {
		if _, ok := a.at[string(m.Body)]; !ok {
			a.at[string(m.Body)] = time.Now()
			a.msgs[string(m.Body)] = m
		}
	}
	return consumer.ConsumeSuccess, nil
}

func (a *arrivalLog) has(body string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.at[body]
	return ok
}

func newArrivalLog() *arrivalLog {
	return &arrivalLog{at: map[string]time.Time{}, msgs: map[string]*primitive.MessageExt{}}
}

// TestKafkaTimerHeadersReachRocketMQ: a Kafka producer schedules records
// with RocketMQ's timer headers; a RocketMQ consumer receives each no
// earlier than due, stored within 100 ms after it, and the record without
// a timer at once.
func TestKafkaTimerHeadersReachRocketMQ(t *testing.T) {
	n := startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("kafka-timers"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if _, err := kadm.NewClient(kc).CreateTopic(ctx, 1, 1, nil, "kafka-timers"); err != nil {
		t.Fatal(err)
	}
	got := newArrivalLog()
	startConsumer(t, n.RemotingAddr(), "kafka-timers-cg", "kafka-timers", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, got.collect)
	if err := kc.ProduceSync(ctx, kgo.StringRecord("ready")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the consumer polling", func() bool { return got.has("ready") })
	sent := time.Now()
	due := map[string]time.Time{
		"delay-sec":  sent.Add(time.Second),
		"delay-ms":   sent.Add(2500 * time.Millisecond),
		"deliver-at": sent.Add(4 * time.Second),
		"now":        sent,
	}
	recs := []*kgo.Record{
		{Value: []byte("delay-ms"), Headers: []kgo.RecordHeader{{Key: "TIMER_DELAY_MS", Value: []byte("2500")}}},
		{Value: []byte("deliver-at"), Headers: []kgo.RecordHeader{{Key: "TIMER_DELIVER_MS", Value: []byte(strconv.FormatInt(due["deliver-at"].UnixMilli(), 10))}}},
		{Value: []byte("delay-sec"), Headers: []kgo.RecordHeader{{Key: "TIMER_DELAY_SEC", Value: []byte("1")}}},
		{Value: []byte("now"), Headers: []kgo.RecordHeader{{Key: "k", Value: []byte("v")}}},
	}
	if err := kc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "every scheduled record", func() bool {
		for body := range due {
			if !got.has(body) {
				return false
			}
		}
		return true
	})
	got.mu.Lock()
	defer got.mu.Unlock()
	for body, want := range due {
		m := got.msgs[body]
		stored := time.UnixMilli(m.StoreTimestamp)
		if body != "now" && (got.at[body].Before(want) || stored.Before(want.Truncate(time.Millisecond)) || stored.Sub(want) > 100*time.Millisecond) {
			t.Errorf("%s: due %v, stored %v, received %v", body, want.Format("15:04:05.000"), stored.Format("15:04:05.000"), got.at[body].Format("15:04:05.000"))
		}
	}
	if got.msgs["now"].GetProperty("k") != "v" || got.msgs["delay-ms"].GetProperty("TIMER_DELAY_MS") != "2500" {
		t.Errorf("headers lost: %v %v", got.msgs["now"].GetProperties(), got.msgs["delay-ms"].GetProperties())
	}
}

// TestKafkaTransactionsHiddenFromRocketMQ: a RocketMQ consumer never sees
// records of aborted Kafka transactions, nor of open ones until they
// commit.
func TestKafkaTransactionsHiddenFromRocketMQ(t *testing.T) {
	n := startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("kafka-txn-x"), kgo.TransactionalID("x-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if _, err := kadm.NewClient(kc).CreateTopic(ctx, 1, 1, nil, "kafka-txn-x"); err != nil {
		t.Fatal(err)
	}
	txn := func(body string, end string) {
		t.Helper()
		if err := kc.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := kc.ProduceSync(ctx, kgo.StringRecord(body)).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if end != "" {
			if err := kc.EndTransaction(ctx, kgo.TransactionEndTry(end == "commit")); err != nil {
				t.Fatal(err)
			}
		}
	}
	txn("committed-1", "commit")
	txn("aborted-1", "abort")
	txn("committed-2", "commit")
	txn("open", "")
	got := newArrivalLog()
	startConsumer(t, n.RemotingAddr(), "kafka-txn-x-cg", "kafka-txn-x", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, got.collect)
	eventually(t, 20*time.Second, "the committed records", func() bool { return got.has("committed-1") && got.has("committed-2") })
	// The aborted record lies between the two in the queue: it would have
	// come with them. The open transaction's record gets a window.
	if got.has("aborted-1") {
		t.Fatalf("aborted record seen: %v", got.at)
	}
	time.Sleep(2 * time.Second)
	if got.has("aborted-1") || got.has("open") {
		t.Fatalf("aborted or open transaction seen: %v", got.at)
	}
	if err := kc.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	committedAt := time.Now()
	eventually(t, 20*time.Second, "the record of the transaction committed last", func() bool { return got.has("open") })
	t.Logf("delivered %v after the commit", time.Since(committedAt))
	if got.has("aborted-1") { // it lies before "open" in the queue
		t.Fatal("aborted record seen")
	}
}
