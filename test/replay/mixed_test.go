package replay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/model"
)

func init() { rlog.SetLogLevel("error") }

// grpcPopWorkload, when set (builds without the race detector), adds POP
// through a RocketMQ 5 gRPC client to the workload.
var grpcPopWorkload func(ctx context.Context, t *testing.T, n *apptest.TestNode)

// compactedWorkload writes keyed records with many overwrites to a
// compacted topic and has the node clean it.
func compactedWorkload(ctx context.Context, t *testing.T, n *apptest.TestNode, cl *kgo.Client, adm *kadm.Client) {
	t.Helper()
	policy, ratio := "compact", "0.01"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &policy, "min.cleanable.dirty.ratio": &ratio}, "compacted"); err != nil {
		t.Fatal(err)
	}
	for round := range 6 {
		for k := range 20 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "compacted", Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "v%d-%d", round, k)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := n.App.Broker().RunCompaction(ctx, true)
	if err != nil {
		t.Fatalf("compaction: %v", err)
	}
	t.Logf("compaction: %+v", res)
}

// bulkWorkload writes a few MiB to a topic and deletes most of it, so the
// log has sealed segments that are mostly dead.
func bulkWorkload(ctx context.Context, t *testing.T, cl *kgo.Client, adm *kadm.Client) {
	t.Helper()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "bulk"); err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 1000)
	for i := range 4000 {
		cl.Produce(ctx, &kgo.Record{Topic: "bulk", Key: fmt.Appendf(nil, "b%d", i), Value: value}, nil)
		if i%500 == 0 { // interleave records that stay
			cl.Produce(ctx, &kgo.Record{Topic: "compacted", Key: fmt.Appendf(nil, "key-%d", i%7), Value: fmt.Appendf(nil, "late-%d", i)}, nil)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var dr kadm.Offsets
	dr.Add(kadm.Offset{Topic: "bulk", Partition: 0, At: 3900})
	if _, err := adm.DeleteRecords(ctx, dr); err != nil {
		t.Fatal(err)
	}
}

// rocketmqWorkload sends, through the RocketMQ remoting client, messages
// with delay levels and timer properties (one of each delivered, one
// pending) and transactional half messages: one committed at once, one
// rolled back, one left unknown and committed by the broker's check-back.
func rocketmqWorkload(ctx context.Context, t *testing.T, n *apptest.TestNode) {
	t.Helper()
	addr := n.RemotingAddr()
	opts := func(group string) []producer.Option {
		return []producer.Option{producer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})), producer.WithGroupName(group),
			producer.WithInstanceName(group), producer.WithRetry(2)}
	}
	p, err := rocketmq.NewProducer(opts("replay-rmq")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	for i, level := range []int{1, 18} { // 1 s and 2 h
		m := primitive.NewMessage("orders", fmt.Appendf(nil, "delayed-%d", i))
		m.WithDelayTimeLevel(level)
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatalf("send delayed: %v", err)
		}
	}
	// Timer messages (RocketMQ 5 properties, sent by the remoting client):
	// one due in a second, one in two hours.
	for i, prop := range [][2]string{{"TIMER_DELAY_SEC", "1"}, {"TIMER_DELIVER_MS", fmt.Sprint(time.Now().Add(2 * time.Hour).UnixMilli())}} {
		m := primitive.NewMessage("orders", fmt.Appendf(nil, "timer-rmq-%d", i))
		m.WithProperty(prop[0], prop[1])
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatalf("send timer: %v", err)
		}
	}
	l := &checkBack{checked: map[string]int{}}
	tp, err := rocketmq.NewTransactionProducer(l, opts("replay-rmq-tx")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(); err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown()
	for _, body := range []string{"commit-1", "rollback-1", "unknown-1"} {
		if _, err := tp.SendMessageInTransaction(ctx, primitive.NewMessage("orders", []byte(body))); err != nil {
			t.Fatalf("send half %s: %v", body, err)
		}
	}
	apptest.Eventually(t, 30*time.Second, "the broker checked the unknown transaction back", func() bool { return l.count("unknown-1") > 0 })
	// The half-message cursor (the starts of the half and op queues)
	// catches up with the resolved transactions.
	b := n.App.Broker()
	apptest.Eventually(t, 30*time.Second, "the half-message cursor at the end", func() bool {
		for _, name := range []string{"txn_half", "txn_op"} {
			tp, err := b.Topic(model.TopicName{Tenant: "system", Namespace: "internal", Topic: name})
			if err != nil {
				return false
			}
			start, _, end, err := b.Engine().Offsets(tp.Queues[0])
			if err != nil || start != end {
				return false
			}
		}
		return true
	})
}

// checkBack commits or rolls back by body prefix and answers a check-back
// with commit.
type checkBack struct {
	mu      sync.Mutex
	checked map[string]int
}

func (c *checkBack) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch string(m.Body)[:4] {
	case "comm":
		return primitive.CommitMessageState
	case "roll":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (c *checkBack) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked[string(m.Body)]++
	return primitive.CommitMessageState
}

func (c *checkBack) count(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked[body]
}
