// Package pulsar_test drives Rosetta's Pulsar listener with
// pulsar-client-go, alone and beside Kafka and RocketMQ clients.
package pulsar_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// client connects pulsar-client-go to n.
func client(t testing.TB, n *apptest.TestNode) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: n.PulsarURL(), OperationTimeout: 10 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: plog.NewLoggerWithSlog(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func receive(t testing.TB, c pulsar.Consumer, d time.Duration) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

// TestProduceConsumeExclusive: a batching producer's messages reach an
// exclusive consumer in order with keys and properties, acknowledged
// messages are not delivered again to the next consumer of the
// subscription, and a Kafka consumer reads the same records.
func TestProduceConsumeExclusive(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic, total = "pulsar-basic", 500
	ctx := context.Background()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, EnableBatchIndexAcknowledgment: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, CompressionType: pulsar.LZ4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("k", i%7), Payload: []byte(fmt.Sprint("m", i)),
			Properties: map[string]string{"i": fmt.Sprint(i)}}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range total / 2 {
		m := receive(t, cons, 10*time.Second)
		if got, want := string(m.Payload()), fmt.Sprint("m", i); got != want {
			t.Fatalf("message %d: %q, want %q", i, got, want)
		}
		if m.Key() != fmt.Sprint("k", i%7) || m.Properties()["i"] != fmt.Sprint(i) {
			t.Fatalf("message %d: key %q properties %v", i, m.Key(), m.Properties())
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	cons.Close()
	cons, err = c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := total / 2; i < total; i++ {
		m := receive(t, cons, 10*time.Second)
		if got, want := string(m.Payload()), fmt.Sprint("m", i); got != want {
			t.Fatalf("after resubscribing, message %d: %q, want %q", i, got, want)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}

	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	got := 0
	kctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for got < total {
		fs := kc.PollFetches(kctx)
		if err := kctx.Err(); err != nil {
			t.Fatalf("kafka consumer: %d of %d records", got, total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != fmt.Sprint("m", got) || string(r.Key) != fmt.Sprint("k", got%7) || r.Offset != int64(got) {
				t.Fatalf("kafka record %d: offset %d key %q value %q", got, r.Offset, r.Key, r.Value)
			}
			got++
		})
	}
}

// TestKafkaRecordsToPulsar: records Kafka producers wrote — uncompressed
// and with each codec, batches sent on as compressed Pulsar entries — reach
// a Pulsar consumer with keys, headers as properties and message ids whose
// entry is the Kafka offset.
func TestKafkaRecordsToPulsar(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, total = "kafka-to-pulsar", 250
	ctx := context.Background()
	c := client(t, n)
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	for k, codec := range codecs {
		kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
			kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for i := k * 50; i < (k+1)*50; i++ {
			r := &kgo.Record{Key: []byte(fmt.Sprint("key", i)), Value: []byte(fmt.Sprint("v", i, " the same words again and again")),
				Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}}}
			kc.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
		if err := kc.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		kc.Close()
	}
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "from-kafka",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := 0
	for seen < total {
		m := receive(t, cons, 10*time.Second)
		if m.Key() == "" || m.Properties()["h"] == "" {
			t.Fatalf("message %v: key %q properties %v", m.ID(), m.Key(), m.Properties())
		}
		var i int
		if _, err := fmt.Sscanf(string(m.Payload()), "v%d", &i); err != nil || m.Key() != fmt.Sprint("key", i) || m.Properties()["h"] != fmt.Sprint(i) ||
			string(m.Payload()) != fmt.Sprint("v", i, " the same words again and again") {
			t.Fatalf("message %q key %q properties %v", m.Payload(), m.Key(), m.Properties())
		}
		seen++
		_ = cons.Ack(m)
	}
}

// TestDeduplicationByProducerName: a producer's name keeps its highest
// sequence id across producers and a broker restart — a new producer of
// the name resumes after it, and messages sent again with sequence ids not
// above it are acknowledged without being stored twice.
func TestDeduplicationByProducerName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := apptest.TestConfig(dir)
	n := apptest.StartTestNode(t, cfg)
	const topic = "pulsar-dedup"
	ctx := context.Background()
	send := func(c pulsar.Client, seqs ...int64) int64 {
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "orders-writer", DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for _, s := range seqs {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("s", s)), SequenceID: &s}); err != nil {
				t.Fatal(err)
			}
		}
		return p.LastSequenceID()
	}
	c := client(t, n)
	send(c, 0, 1, 2, 3)
	if last := send(c, 2, 3); last != 3 {
		t.Fatalf("a second producer of the name: last sequence id %d, want 3", last)
	}
	n.Stop(t)
	n = apptest.StartTestNode(t, cfg)
	c = client(t, n)
	send(c, 3, 4)
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Payload()))
	}
	if fmt.Sprint(got) != "[s0 s1 s2 s3 s4]" {
		t.Fatalf("stored %v, want each sequence id once", got)
	}
}
