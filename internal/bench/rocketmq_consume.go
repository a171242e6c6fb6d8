package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// rocketmqConsumer starts a clustering push consumer of a fresh group,
// from the first offset, handing every message to fn.
func rocketmqConsumer(o RocketMQOptions, fn func(msgs []*primitive.MessageExt)) (rocketmq.PushConsumer, error) {
	group := fmt.Sprintf("rosetta-bench-%d", time.Now().UnixNano())
	c, err := rocketmq.NewPushConsumer(consumer.WithGroupName(group), consumer.WithInstance(group),
		consumer.WithNsResolver(primitive.NewPassthroughResolver(strings.Split(o.NameServer, ","))),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset), consumer.WithPullBatchSize(64),
		consumer.WithConsumeMessageBatchMaxSize(64))
	if err != nil {
		return nil, err
	}
	err = c.Subscribe(o.Topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			fn(msgs)
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		return nil, err
	}
	return c, c.Start()
}

// RocketMQConsume reads a topic from the start with a push consumer until
// it has received o.Messages, and reports the rate.
func RocketMQConsume(ctx context.Context, o RocketMQOptions) (*Report, error) {
	rlog.SetLogLevel("error")
	var mu sync.Mutex
	var n, bytes int64
	done := make(chan struct{})
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	c, err := rocketmqConsumer(o, func(msgs []*primitive.MessageExt) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			n++
			bytes += int64(len(m.Body))
		}
		if n >= o.Messages && done != nil {
			close(done)
			done = nil
		}
	})
	if err != nil {
		return nil, err
	}
	defer c.Shutdown()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	el := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	r := &Report{Name: "rocketmq consume (push consumer, catch-up read from the start)", Records: n, Messages: n, Bytes: bytes,
		Elapsed: el, CPU: cpuTime() - cpu0}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

// RocketMQE2E sends at a fixed rate and measures, at a push consumer, the
// time from each send to its receipt. The sends are the Go client's async
// sends, or with o.Raw the lean pipelined sender's (o.Connections
// connections), when the Go client's cost would bound the rate.
func RocketMQE2E(ctx context.Context, o RocketMQOptions) (*Report, error) {
	rlog.SetLogLevel("error")
	body := make([]byte, max(o.Size, 8))
	send, stop, err := e2eSender(ctx, o, body)
	if err != nil {
		return nil, err
	}
	defer stop()
	var mu sync.Mutex
	lats := make([]time.Duration, 0, o.Messages)
	done := make(chan struct{}) // closed once every message arrived
	allIn := false
	c, err := rocketmqConsumer(o, func(msgs []*primitive.MessageExt) {
		now := time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if len(m.Body) < 8 {
				continue
			}
			if sent := int64(binary.BigEndian.Uint64(m.Body)); sent > 0 {
				lats = append(lats, time.Duration(now-sent))
			}
		}
		if int64(len(lats)) >= o.Messages && !allIn {
			close(done)
			allIn = true
		}
	})
	if err != nil {
		return nil, err
	}
	defer c.Shutdown()
	time.Sleep(3 * time.Second) // let the consumer take its queues
	bcpu0 := procCPU(o.BrokerPID)
	interval := time.Second / time.Duration(max(o.Rate, 1))
	start := time.Now()
	// stamped waits until message i is due and returns its body, stamped
	// with the time it is sent.
	stamped := func(i int64, b []byte) []byte {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		binary.BigEndian.PutUint64(b, uint64(time.Now().UnixNano()))
		return b
	}
	if err := send(stamped); err != nil {
		return nil, err
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		return nil, fmt.Errorf("consumer received %d of %d", len(lats), o.Messages)
	}
	mu.Lock()
	defer mu.Unlock()
	how := "async sends"
	if o.Raw {
		how = fmt.Sprintf("raw pipelined sender, %d connections", max(o.Connections, 1))
	}
	r := &Report{Name: fmt.Sprintf("rocketmq end-to-end: %d msgs/s offered, %d B messages, %s", o.Rate, o.Size, how),
		Records: int64(len(lats)), Messages: int64(len(lats)), Bytes: int64(len(lats)) * int64(o.Size), Elapsed: time.Since(start),
		Latencies: lats}
	r.Extra = append(r.Extra, "(latency: send to push-consumer receipt)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

// e2eSender creates the end-to-end topic with one send (the consumer,
// started after it, skips that message) and returns what sends the
// measured messages: send(stamped) sends o.Messages, message i with the
// body stamped(i, buf) gives, and answers once all are acknowledged.
func e2eSender(ctx context.Context, o RocketMQOptions, body []byte) (send func(stamped func(int64, []byte) []byte) error, stop func(), err error) {
	if o.Raw {
		return e2eRawSender(ctx, o, body)
	}
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(strings.Split(o.NameServer, ","))),
		producer.WithGroupName("rosetta-bench-e2e"), producer.WithRetry(2))
	if err != nil {
		return nil, nil, err
	}
	if err := p.Start(); err != nil {
		return nil, nil, err
	}
	if _, err := p.SendSync(ctx, primitive.NewMessage(o.Topic, body)); err != nil {
		_ = p.Shutdown()
		return nil, nil, err
	}
	send = func(stamped func(int64, []byte) []byte) error {
		var failed error
		var fmu sync.Mutex
		var pending sync.WaitGroup
		for i := int64(0); i < o.Messages && ctx.Err() == nil; i++ {
			b := stamped(i, make([]byte, len(body)))
			pending.Add(1)
			err := p.SendAsync(ctx, func(_ context.Context, _ *primitive.SendResult, err error) {
				defer pending.Done()
				if err != nil {
					fmu.Lock()
					failed = err
					fmu.Unlock()
				}
			}, primitive.NewMessage(o.Topic, b))
			if err != nil {
				pending.Done()
				return err
			}
		}
		pending.Wait()
		fmu.Lock()
		defer fmu.Unlock()
		return failed
	}
	return send, func() { _ = p.Shutdown() }, nil
}
