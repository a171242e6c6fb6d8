package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaOptions describe a Kafka workload driven with franz-go.
type KafkaOptions struct {
	Brokers     string
	Topic       string
	Partitions  int
	Size        int
	Messages    int64
	Linger      time.Duration
	BatchBytes  int32
	Acks        string // all | leader | none
	Compression string
	Rate        int // messages/s for the end-to-end workload
	BrokerPID   int // when set, report the broker process's CPU
	// SASLMechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SASLUser and
	// SASLPassword authenticate; TLS dials with TLS (any certificate).
	SASLMechanism, SASLUser, SASLPassword string
	TLS                                   bool
}

func (o KafkaOptions) client(extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(o.Brokers, ",")...), kgo.DefaultProduceTopic(o.Topic),
		kgo.ProducerLinger(o.Linger), kgo.MaxBufferedRecords(1 << 20)}
	if o.BatchBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(o.BatchBytes))
	}
	switch o.Acks {
	case "leader":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "none":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	}
	switch strings.ToUpper(o.SASLMechanism) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: o.SASLUser, Pass: o.SASLPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: o.SASLUser, Pass: o.SASLPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: o.SASLUser, Pass: o.SASLPassword}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("unknown SASL mechanism %q", o.SASLMechanism)
	}
	if o.TLS {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // a benchmark
	}
	switch o.Compression {
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	default:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	}
	return kgo.NewClient(append(opts, extra...)...)
}

func (o KafkaOptions) ensureTopic(ctx context.Context) error {
	cl, err := o.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// The cluster's replication factor (-1): a factor of 1 would put the
	// topic in groups of one copy.
	resp, err := adm.CreateTopic(ctx, int32(o.Partitions), -1, nil, o.Topic)
	if err != nil && !strings.Contains(fmt.Sprint(err), "TOPIC_ALREADY_EXISTS") {
		return err
	}
	if resp.Err != nil && !strings.Contains(resp.Err.Error(), "TOPIC_ALREADY_EXISTS") {
		return resp.Err
	}
	return nil
}

// procCPU returns a process's user+system CPU time from /proc.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

func procRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n << 10
		}
	}
	return 0
}

func (o KafkaOptions) brokerExtra(r *Report, cpu0 time.Duration) {
	if o.BrokerPID <= 0 {
		return
	}
	cpu := procCPU(o.BrokerPID) - cpu0
	r.Extra = append(r.Extra,
		fmt.Sprintf("broker cpu     %.2f s, %.3f CPU-s per million msgs", cpu.Seconds(), cpu.Seconds()/float64(r.Messages)*1e6),
		fmt.Sprintf("broker rss     %.1f MiB", float64(procRSS(o.BrokerPID))/(1<<20)))
}

// KafkaProduce produces as fast as the broker takes it and reports
// throughput, per-record acknowledgement latency and CPU.
func KafkaProduce(ctx context.Context, o KafkaOptions) (*Report, error) {
	if err := o.ensureTopic(ctx); err != nil {
		return nil, err
	}
	cl, err := o.client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	value := make([]byte, o.Size)
	_, _ = rand.Read(value)
	lats := make([]time.Duration, 0, o.Messages)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed atomic.Value
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	for i := int64(0); i < o.Messages; i++ {
		wg.Add(1)
		t0 := time.Now()
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			d := time.Since(t0)
			if err != nil {
				failed.CompareAndSwap(nil, err)
			}
			mu.Lock()
			lats = append(lats, d)
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	r := &Report{Name: fmt.Sprintf("kafka produce: %d B records, %d partitions, linger %v, batch %d B, acks %s, compression %s",
		o.Size, o.Partitions, o.Linger, o.BatchBytes, o.Acks, o.Compression),
		Records: o.Messages, Messages: o.Messages, Bytes: o.Messages * int64(o.Size), Elapsed: el,
		CPU: cpuTime() - cpu0, Latencies: lats}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	r.Extra = append(r.Extra, "(latency: from Produce call to acknowledgement, per record; cpu: load generator)")
	o.brokerExtra(r, bcpu0)
	return r, nil
}

// KafkaEndToEnd produces at a fixed rate and measures the time from send to
// receipt by a consumer.
func KafkaEndToEnd(ctx context.Context, o KafkaOptions) (*Report, error) {
	if err := o.ensureTopic(ctx); err != nil {
		return nil, err
	}
	cons, err := o.client(kgo.ConsumeTopics(o.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	// Let the consumer find its start before producing.
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	cons.PollFetches(pctx)
	pcancel()
	prod, err := o.client()
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	lats := make([]time.Duration, 0, o.Messages)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for int64(len(lats)) < o.Messages && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now().UnixNano()
			fs.EachRecord(func(r *kgo.Record) {
				if len(r.Value) >= 8 {
					lats = append(lats, time.Duration(now-int64(binary.BigEndian.Uint64(r.Value))))
				}
			})
		}
	}()
	bcpu0 := procCPU(o.BrokerPID)
	interval := time.Second / time.Duration(max(o.Rate, 1))
	start := time.Now()
	for i := int64(0); i < o.Messages; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		v := make([]byte, max(o.Size, 8))
		binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
		prod.Produce(ctx, &kgo.Record{Value: v}, nil)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-done:
	case <-tctx.Done():
		return nil, fmt.Errorf("consumer received %d of %d", len(lats), o.Messages)
	}
	el := time.Since(start)
	r := &Report{Name: fmt.Sprintf("kafka end-to-end: %d msgs/s offered, %d B records, linger %v, acks %s", o.Rate, o.Size, o.Linger, o.Acks),
		Records: o.Messages, Messages: o.Messages, Bytes: o.Messages * int64(o.Size), Elapsed: el, Latencies: lats}
	r.Extra = append(r.Extra, "(latency: producer send to consumer receipt)")
	o.brokerExtra(r, bcpu0)
	return r, nil
}

// KafkaConsume reads a topic from the start until it has read o.Messages.
func KafkaConsume(ctx context.Context, o KafkaOptions) (*Report, error) {
	cl, err := o.client(kgo.ConsumeTopics(o.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	var n, bytes int64
	for n < o.Messages && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil && ctx.Err() == nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) { n++; bytes += int64(len(r.Value)) })
	}
	r := &Report{Name: "kafka consume (catch-up read from the start)", Records: n, Messages: n, Bytes: bytes,
		Elapsed: time.Since(start), CPU: cpuTime() - cpu0}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	o.brokerExtra(r, bcpu0)
	return r, nil
}
