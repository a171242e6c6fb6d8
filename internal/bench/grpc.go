package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"golang.org/x/sync/errgroup"
)

// GRPCOptions describe a RocketMQ 5 gRPC workload driven with the official
// v5 Go client.
type GRPCOptions struct {
	Endpoint  string
	Topic     string
	Group     string
	Size      int
	Messages  int64
	Senders   int // concurrent sync senders
	Receivers int // concurrent receive+ack loops
	Batch     int32
	// AckInflight is how many of a batch's acks one loop has in flight at
	// once, each its own call; 1 acknowledges one after another.
	AckInflight int
	BrokerPID   int
	TLS         bool // connect with TLS (the clients' default)
}

func (o GRPCOptions) config() *rmq.Config {
	// The client logs to a file under $HOME unless told otherwise.
	_ = os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	rmq.EnableSsl = o.TLS
	return &rmq.Config{Endpoint: o.Endpoint, ConsumerGroup: o.Group, Credentials: &credentials.SessionCredentials{}}
}

// GRPCSend sends with concurrent sync senders and reports throughput, send
// latency and CPU.
func GRPCSend(ctx context.Context, o GRPCOptions) (*Report, error) {
	p, err := rmq.NewProducer(o.config(), rmq.WithTopics(o.Topic))
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.GracefulStop()
	body := make([]byte, o.Size)
	_, _ = rand.Read(body)
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	all, err := runSenders(ctx, o.Messages, o.Senders, func(int64) error {
		_, err := p.Send(ctx, &rmq.Message{Topic: o.Topic, Body: body})
		return err
	})
	el := time.Since(start)
	if err != nil {
		return nil, err
	}
	r := opsReport(fmt.Sprintf("grpc send: %d B messages, %d sync senders", o.Size, o.Senders), all, o.Size, el, cpu0)
	r.Extra = append(r.Extra, "(latency: one sync send, request to acknowledgement; cpu: load generator)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

// GRPCReceive receives and acknowledges Messages messages with SimpleConsumer
// loops (the topic must hold them, e.g. after GRPCSend) and reports the
// rate and the latency of one receive+ack of a batch.
func GRPCReceive(ctx context.Context, o GRPCOptions) (*Report, error) {
	var lats []time.Duration
	var done time.Time
	var mu sync.Mutex
	var got atomic.Int64
	var failed atomic.Value
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for range o.Receivers {
		sc, err := rmq.NewSimpleConsumer(o.config(), rmq.WithSimpleAwaitDuration(2*time.Second),
			rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{o.Topic: rmq.SUB_ALL}))
		if err != nil {
			return nil, err
		}
		if err := sc.Start(); err != nil {
			return nil, err
		}
		defer sc.GracefulStop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := 0
			for got.Load() < o.Messages && ctx.Err() == nil && idle < 5 {
				t0 := time.Now()
				mvs, err := sc.Receive(ctx, o.Batch, 30*time.Second)
				var es *rmq.ErrRpcStatus
				if errors.As(err, &es) && es.Code == 40401 {
					idle++
					continue
				}
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				idle = 0
				if err := ackAll(ctx, sc, mvs, o.AckInflight); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				n := got.Add(int64(len(mvs)))
				mu.Lock()
				lats = append(lats, time.Since(t0))
				if n >= o.Messages && n-int64(len(mvs)) < o.Messages {
					done = time.Now()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Until the last message was acknowledged: the other loops' receives
	// may then wait out their long poll on the drained topic.
	mu.Lock()
	el := done.Sub(start)
	mu.Unlock()
	if el <= 0 {
		el = time.Since(start)
	}
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	n := got.Load()
	r := &Report{Name: fmt.Sprintf("grpc receive+ack: %d SimpleConsumers, batches of %d", o.Receivers, o.Batch),
		Records: int64(len(lats)), Messages: n, Bytes: n * int64(o.Size), Elapsed: el, CPU: cpuTime() - cpu0, Latencies: lats}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	r.Extra = append(r.Extra, fmt.Sprintf("%.0f msgs/s received and acknowledged (latency: one receive plus its acks)", float64(n)/el.Seconds()))
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

// ackAll acknowledges every message, one call each, with up to inflight
// calls outstanding (as an application acking from worker goroutines, or
// the Java client's ackAsync, does).
func ackAll(ctx context.Context, sc rmq.SimpleConsumer, mvs []*rmq.MessageView, inflight int) error {
	if inflight <= 1 {
		for _, mv := range mvs {
			if err := sc.Ack(ctx, mv); err != nil {
				return err
			}
		}
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(inflight)
	for _, mv := range mvs {
		g.Go(func() error { return sc.Ack(ctx, mv) })
	}
	return g.Wait()
}
