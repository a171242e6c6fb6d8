package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// PulsarOptions describe a Pulsar workload driven with pulsar-client-go.
type PulsarOptions struct {
	URL          string
	Topic        string
	Subscription string
	Size         int
	Messages     int64
	Compression  string // none, lz4, zstd
	MaxPending   int    // producer's messages in flight
	Shared       bool   // consume through a Shared subscription (else Exclusive)
	Rate         int    // messages/s for the end-to-end workload
	BrokerPID    int
}

func (o PulsarOptions) client() (pulsar.Client, error) {
	return pulsar.NewClient(pulsar.ClientOptions{URL: o.URL, OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.DiscardHandler))})
}

func (o PulsarOptions) producer(c pulsar.Client) (pulsar.Producer, error) {
	opts := pulsar.ProducerOptions{Topic: o.Topic, MaxPendingMessages: o.MaxPending, SendTimeout: time.Minute}
	switch o.Compression {
	case "lz4":
		opts.CompressionType = pulsar.LZ4
	case "zstd":
		opts.CompressionType = pulsar.ZSTD
	case "", "none":
	default:
		return nil, fmt.Errorf("compression %q: none, lz4 or zstd", o.Compression)
	}
	return c.CreateProducer(opts)
}

// PulsarProduce sends asynchronously with the client's batching (10 ms,
// 1,000 messages or 128 KiB a batch) and reports throughput, the latency
// from send to receipt, and CPU.
func PulsarProduce(ctx context.Context, o PulsarOptions) (*Report, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	p, err := o.producer(c)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	body := make([]byte, o.Size)
	_, _ = rand.Read(body)
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: body}); err != nil { // warm up: the topic is made
		return nil, err
	}
	lats := make([]time.Duration, 0, o.Messages)
	var mu sync.Mutex
	var failed atomic.Value
	var wg sync.WaitGroup
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	for i := int64(0); i < o.Messages && failed.Load() == nil; i++ {
		t0 := time.Now()
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: body}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				failed.CompareAndSwap(nil, err)
				return
			}
			d := time.Since(t0)
			mu.Lock()
			lats = append(lats, d)
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	r := opsReport(fmt.Sprintf("pulsar produce: %d B messages, batching, compression %s", o.Size, orNone(o.Compression)), lats, o.Size, el, cpu0)
	r.Extra = append(r.Extra, "(latency: send to receipt, batching delay included; cpu: load generator)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// PulsarConsume reads what the topic holds from the start with one
// consumer (Exclusive, or Shared), acknowledging each message.
func PulsarConsume(ctx context.Context, o PulsarOptions) (*Report, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	typ := pulsar.Exclusive
	if o.Shared {
		typ = pulsar.Shared
	}
	sub := o.Subscription
	if sub == "" {
		sub = fmt.Sprintf("bench-%d", time.Now().UnixNano())
	}
	co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: o.Topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 2000})
	if err != nil {
		return nil, err
	}
	defer co.Close()
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	var n, bytes int64
	for n < o.Messages {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := co.Receive(rctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("after %d messages: %w", n, err)
		}
		n++
		bytes += int64(len(m.Payload()))
		co.AckID(m.ID())
	}
	el := time.Since(start)
	r := &Report{Name: fmt.Sprintf("pulsar consume: %s subscription from the start", typeName(o.Shared)), Records: n, Messages: n,
		Bytes: bytes, Elapsed: el, CPU: cpuTime() - cpu0}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

func typeName(shared bool) string {
	if shared {
		return "Shared"
	}
	return "Exclusive"
}

// PulsarE2E sends at a fixed rate and measures, at a consumer, the time
// from send to receipt of each message (its send time travels in the
// payload).
func PulsarE2E(ctx context.Context, o PulsarOptions) (*Report, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: o.Topic, SubscriptionName: fmt.Sprintf("bench-e2e-%d", time.Now().UnixNano()),
		Type: pulsar.Exclusive, SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	if err != nil {
		return nil, err
	}
	defer co.Close()
	p, err := o.producer(c)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	size := max(o.Size, 8)
	lats := make([]time.Duration, 0, o.Messages)
	done := make(chan error, 1)
	go func() {
		for int64(len(lats)) < o.Messages {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			m, err := co.Receive(rctx)
			cancel()
			if err != nil {
				done <- err
				return
			}
			sent := int64(binary.BigEndian.Uint64(m.Payload()))
			lats = append(lats, time.Duration(time.Now().UnixNano()-sent))
			co.AckID(m.ID())
		}
		done <- nil
	}()
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	interval := time.Second / time.Duration(max(o.Rate, 1))
	for i := int64(0); i < o.Messages; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		body := make([]byte, size)
		binary.BigEndian.PutUint64(body, uint64(time.Now().UnixNano()))
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: body}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				select {
				case done <- err:
				default:
				}
			}
		})
	}
	if err := <-done; err != nil {
		return nil, err
	}
	el := time.Since(start)
	r := opsReport(fmt.Sprintf("pulsar end to end: %d B messages at %d msgs/s, batching", size, o.Rate), lats, size, el, cpu0)
	r.Extra = append(r.Extra, "(latency: send to receipt at the consumer, batching delay included)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}
