package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// RocketMQOptions describe a RocketMQ remoting workload driven with
// rocketmq-client-go/v2.
type RocketMQOptions struct {
	NameServer string
	Topic      string
	Size       int
	Messages   int64
	Senders    int // concurrent sync senders
	Rate       int // messages/s for the end-to-end workload
	// Raw sender (produce/e2e --raw): connections and requests in flight each.
	Raw         bool
	Connections int
	Inflight    int
	BrokerPID   int
}

// RocketMQProduce sends with concurrent sync senders (each waits for its
// acknowledgement before the next send) and reports throughput, send
// latency and CPU.
func RocketMQProduce(ctx context.Context, o RocketMQOptions) (*Report, error) {
	rlog.SetLogLevel("error")
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(strings.Split(o.NameServer, ","))),
		producer.WithGroupName("rosetta-bench"), producer.WithRetry(2))
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.Shutdown()
	body := make([]byte, o.Size)
	_, _ = rand.Read(body)
	// Warm up: the first send creates the topic.
	if _, err := p.SendSync(ctx, primitive.NewMessage(o.Topic, body)); err != nil {
		return nil, err
	}
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	all, err := runSenders(ctx, o.Messages, o.Senders, func(int64) error {
		res, err := p.SendSync(ctx, primitive.NewMessage(o.Topic, body))
		if err == nil && res.Status != primitive.SendOK {
			err = fmt.Errorf("send status %d", res.Status)
		}
		return err
	})
	el := time.Since(start)
	if err != nil {
		return nil, err
	}
	r := opsReport(fmt.Sprintf("rocketmq produce: %d B messages, %d sync senders", o.Size, o.Senders), all, o.Size, el, cpu0)
	r.Extra = append(r.Extra, "(latency: one sync send, request to acknowledgement; cpu: load generator)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}
