package rocketmq_test

import (
	"context"
	"fmt"
	"strings"
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

// consumeFunc handles one delivery of messages.
type consumeFunc = func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error)

// startConsumer starts a push consumer of topic in group (from the first
// offset, in its own client instance) calling fn, with further options. It
// returns a function that shuts it down; that also happens when the test
// ends.
func startConsumer(t *testing.T, addr, group, topic string, sel consumer.MessageSelector, fn consumeFunc, opts ...consumer.Option) func() {
	t.Helper()
	base := []consumer.Option{consumer.WithGroupName(group),
		consumer.WithInstance(fmt.Sprintf("%s-%d", group, instances.Add(1))),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset)}
	c, err := rocketmq.NewPushConsumer(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, sel, fn); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = c.Shutdown() }) }
	t.Cleanup(stop)
	return stop
}

// collect records every delivered message in out and acknowledges it.
func (r *received) collect(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	r.mu.Lock()
	for _, m := range msgs {
		r.seen[string(m.Body)] = m
	}
	r.mu.Unlock()
	return consumer.ConsumeSuccess, nil
}

// startPushConsumer starts a consumer with a TAG subscription collecting
// into out.
func startPushConsumer(t *testing.T, addr, group, topic, expr string, out *received, opts ...consumer.Option) {
	t.Helper()
	startConsumer(t, addr, group, topic, consumer.MessageSelector{Type: consumer.TAG, Expression: expr}, out.collect, opts...)
}

// TestProduceAndPushConsume: the Go remoting client's producer (sync sends,
// single and batch, to a topic created on first send) and push consumers
// (all tags, and a tag filter) work against Rosetta's name-server address.
func TestProduceAndPushConsume(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "pg", producer.WithRetry(2))
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

// TestSQL92Filter: a push consumer subscribing with a SQL92 expression gets
// exactly the messages whose properties match it.
func TestSQL92Filter(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "sql-pg")
	ctx := context.Background()
	want := map[string]bool{}
	for i := 0; i < 40; i++ {
		m := primitive.NewMessage("sqltopic", []byte(fmt.Sprintf("s%d", i)))
		m.WithProperty("n", fmt.Sprint(i))
		m.WithProperty("region", []string{"eu", "us"}[i%2])
		m.WithTag([]string{"A", "B"}[i%3%2])
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatal(err)
		}
		if i >= 10 && i < 30 && i%2 == 0 && i%3%2 == 0 {
			want[fmt.Sprintf("s%d", i)] = true
		}
	}
	got := &received{seen: map[string]*primitive.MessageExt{}}
	startConsumer(t, addr, "sql-cg", "sqltopic", consumer.MessageSelector{Type: consumer.SQL92,
		Expression: "n BETWEEN 10 AND 29 AND region = 'eu' AND TAGS IN ('A')"}, got.collect)
	eventually(t, 30*time.Second, "the matching messages", func() bool { return got.count() >= len(want) })
	time.Sleep(500 * time.Millisecond)
	got.mu.Lock()
	defer got.mu.Unlock()
	for body := range got.seen {
		if !want[body] {
			t.Fatalf("%s passed the filter", body)
		}
	}
	if len(got.seen) != len(want) {
		t.Fatalf("got %d messages, want %d", len(got.seen), len(want))
	}
}

// TestBroadcasting: every member of a broadcasting group gets every message.
func TestBroadcasting(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "bc-pg")
	const total = 30
	for i := 0; i < total; i++ {
		if _, err := p.SendSync(context.Background(), primitive.NewMessage("news", []byte(fmt.Sprint("n", i)))); err != nil {
			t.Fatal(err)
		}
	}
	// Broadcasting consumers keep their offsets in local files named after
	// the group: a group new to this run starts from the first offset.
	group := fmt.Sprint("bc-cg-", time.Now().UnixNano())
	var outs []*received
	for i := 0; i < 2; i++ {
		out := &received{seen: map[string]*primitive.MessageExt{}}
		outs = append(outs, out)
		startPushConsumer(t, addr, group, "news", "*", out, consumer.WithConsumerModel(consumer.BroadCasting))
	}
	for i, out := range outs {
		eventually(t, 30*time.Second, fmt.Sprint("member ", i, " to get every message"), func() bool { return out.count() == total })
	}
}

// TestAsyncAndOnewaySends: async and one-way sends arrive with their keys,
// tags and properties intact.
func TestAsyncAndOnewaySends(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "modes-pg")
	ctx := context.Background()
	// A first sync send creates the topic.
	if _, err := p.SendSync(ctx, primitive.NewMessage("modes", []byte("sync"))); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		m := primitive.NewMessage("modes", []byte(fmt.Sprint("async-", i)))
		m.WithTag("async")
		m.WithKeys([]string{fmt.Sprint("ak", i)})
		m.WithProperty("mode", "async")
		wg.Add(1)
		if err := p.SendAsync(ctx, func(_ context.Context, res *primitive.SendResult, err error) {
			if err != nil || res.Status != primitive.SendOK {
				t.Errorf("async send: %v %v", res, err)
			}
			wg.Done()
		}, m); err != nil {
			t.Fatal(err)
		}
		o := primitive.NewMessage("modes", []byte(fmt.Sprint("oneway-", i)))
		o.WithTag("oneway")
		o.WithProperty("mode", "oneway")
		if err := p.SendOneWay(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	got := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, addr, "modes-cg", "modes", "*", got)
	eventually(t, 30*time.Second, "every message", func() bool { return got.count() == 41 })
	got.mu.Lock()
	defer got.mu.Unlock()
	for body, m := range got.seen {
		mode, _, _ := strings.Cut(body, "-")
		if mode == "sync" {
			continue
		}
		if m.GetTags() != mode || m.GetProperty("mode") != mode || (mode == "async" && !strings.HasPrefix(m.GetKeys(), "ak")) {
			t.Fatalf("%s: tag %q, mode %q, keys %q", body, m.GetTags(), m.GetProperty("mode"), m.GetKeys())
		}
	}
}
