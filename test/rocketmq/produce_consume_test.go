package rocketmq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// received collects consumed messages by body.
type received struct {
	mu   sync.Mutex
	seen map[string]*primitive.MessageExt
}

func (r *received) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// instances numbers consumers: each gets its own client instance, since the
// Go client's shared instance rebalances every consumer in it on a
// notification, racing with consumers still starting.
var instances atomic.Int64

func startPushConsumer(t *testing.T, addr, group, topic, expr string, out *received) {
	t.Helper()
	c, err := rocketmq.NewPushConsumer(consumer.WithGroupName(group),
		consumer.WithInstance(fmt.Sprintf("%s-%d", group, instances.Add(1))),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: expr},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			out.mu.Lock()
			for _, m := range msgs {
				out.seen[string(m.Body)] = m
			}
			out.mu.Unlock()
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
}

// TestProduceAndPushConsume: the Go remoting client's producer (sync sends,
// single and batch, to a topic created on first send) and push consumers
// (all tags, and a tag filter) work against Rosetta's name-server address.
func TestProduceAndPushConsume(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})),
		producer.WithGroupName("pg"), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const total = 200
	for i := 0; i < total; i += 2 {
		m1 := primitive.NewMessage("orders", []byte(fmt.Sprintf("m%d", i)))
		m1.WithTag("A")
		m1.WithKeys([]string{fmt.Sprintf("k%d", i)})
		m1.WithProperty("color", "red")
		res, err := p.SendSync(ctx, m1)
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
		if res.OffsetMsgID == "" || res.MsgID == "" {
			t.Fatalf("send result without ids: %+v", res)
		}
		m2 := primitive.NewMessage("orders", []byte(fmt.Sprintf("m%d", i+1)))
		m2.WithTag("B")
		m3 := primitive.NewMessage("orders", []byte(fmt.Sprintf("extra%d", i)))
		m3.WithTag("C")
		if res, err := p.SendSync(ctx, m2, m3); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("batch send %d: %v %v", i, res, err)
		}
	}
	all := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, addr, "cg-all", "orders", "*", all)
	onlyA := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, addr, "cg-a", "orders", "A", onlyA)
	eventually(t, time.Minute, "every message consumed", func() bool { return all.count() == total*3/2 })
	eventually(t, time.Minute, "the tag-A messages consumed", func() bool { return onlyA.count() == total/2 })
	onlyA.mu.Lock()
	defer onlyA.mu.Unlock()
	for body, m := range onlyA.seen {
		if m.GetTags() != "A" {
			t.Fatalf("tag filter let %s (tag %q) through", body, m.GetTags())
		}
		if m.GetProperty("color") != "red" || m.GetKeys() == "" || m.Topic != "orders" {
			t.Fatalf("message %s lost its properties: %+v", body, m)
		}
	}
}
