package rocketmq_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestCrossProtocol: one topic serves both protocols. Records a Kafka
// producer writes (batched, compressed, with keys and headers) reach a
// RocketMQ push consumer with their key and headers as KEYS and properties;
// messages a RocketMQ producer sends reach a Kafka consumer with KEYS as the
// key and properties as headers.
func TestCrossProtocol(t *testing.T) {
	n := startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("both"),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ConsumeTopics("both"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if _, err := kadm.NewClient(kc).CreateTopic(ctx, 2, 1, nil, "both"); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := 0; i < 20; i++ {
		kc.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("kk%d", i)), Value: []byte(fmt.Sprintf("from-kafka-%d", i)),
			Timestamp: stamp.Add(time.Duration(i) * time.Millisecond),
			Headers:   []kgo.RecordHeader{{Key: "origin", Value: []byte("kafka")}, {Key: "rocketmq.TAGS", Value: []byte("K")}}}, nil)
	}
	if err := kc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, n.RemotingAddr(), "cross-rmq", "both", "K", got)
	eventually(t, 30*time.Second, "Kafka records consumed over remoting", func() bool { return got.count() == 20 })
	got.mu.Lock()
	for body, m := range got.seen {
		if m.GetProperty("origin") != "kafka" || m.GetKeys() == "" || m.GetTags() != "K" {
			t.Fatalf("%s: %+v", body, m.GetProperties())
		}
		var i int
		fmt.Sscanf(body, "from-kafka-%d", &i)
		if m.GetKeys() != fmt.Sprintf("kk%d", i) || m.BornTimestamp != stamp.UnixMilli()+int64(i) {
			t.Fatalf("%s: keys %q born %d, want kk%d and %d", body, m.GetKeys(), m.BornTimestamp, i, stamp.UnixMilli()+int64(i))
		}
	}
	got.mu.Unlock()
	// The key index holds Kafka keys too.
	q := call(t, n.RemotingAddr(), &protocol.Command{Code: protocol.QueryMessage, ExtFields: protocol.FieldsOf(map[string]string{
		"topic": "both", "key": "kk7", "maxNum": "32", "beginTimestamp": "0",
		"endTimestamp": strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)})})
	if msgs := primitive.DecodeMessage(q.Body); q.Code != protocol.Success || len(msgs) != 1 || string(msgs[0].Body) != "from-kafka-7" {
		t.Fatalf("query by Kafka key: code %d %s, %d messages", q.Code, q.Remark, len(msgs))
	}

	p := startProducer(t, n.RemotingAddr(), "cross-pg")
	m := primitive.NewMessage("both", []byte("from-rocketmq"))
	m.WithKeys([]string{"rk"})
	m.WithTag("T")
	m.WithProperty("origin", "rocketmq")
	sent, err := p.SendSync(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := protocol.ParseOffsetMessageID(sent.OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	viewed := primitive.DecodeMessage(call(t, n.RemotingAddr(), &protocol.Command{Code: protocol.ViewMessageByID,
		ExtFields: protocol.FieldsOf(map[string]string{"offset": strconv.FormatInt(pos, 10)})}).Body)
	if len(viewed) != 1 {
		t.Fatal("sent message not found by its offset id")
	}
	// Bodies over 4 KiB leave the Go client zlib-compressed; Kafka readers
	// get them inflated.
	big := bytes.Repeat([]byte("0123456789"), 1000)
	if _, err := p.SendSync(ctx, primitive.NewMessage("both", big)); err != nil {
		t.Fatal(err)
	}
	sawBig := false
	var found *kgo.Record
	for {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the RocketMQ message never reached the Kafka consumer")
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == "from-rocketmq" {
				found = r
			}
			if len(r.Value) > 4096 {
				if !bytes.Equal(r.Value, big) {
					t.Fatalf("large body of %d bytes reached Kafka altered", len(r.Value))
				}
				sawBig = true
			}
		})
		if found == nil || !sawBig {
			continue
		}
		headers := map[string]string{}
		for _, h := range found.Headers {
			headers[h.Key] = string(h.Value)
		}
		if string(found.Key) != "rk" || headers["origin"] != "rocketmq" || headers["rocketmq.TAGS"] != "T" {
			t.Fatalf("key %q headers %v", found.Key, headers)
		}
		if found.Timestamp.UnixMilli() != viewed[0].BornTimestamp {
			t.Fatalf("Kafka timestamp %d, born timestamp %d", found.Timestamp.UnixMilli(), viewed[0].BornTimestamp)
		}
		return
	}
}

// TestNamespaces: a RocketMQ client's namespace option ("ns%topic" on the
// wire) is a Rosetta namespace, which Kafka clients name "ns/topic".
func TestNamespaces(t *testing.T) {
	n := startNode(t)
	p := startProducer(t, n.RemotingAddr(), "ns-pg", producer.WithNamespace("team1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, primitive.NewMessage("events", []byte("in team1"))); err != nil {
		t.Fatal(err)
	}
	got := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, n.RemotingAddr(), "ns-cg", "events", "*", got, consumer.WithNamespace("team1"))
	eventually(t, 20*time.Second, "the namespaced message over remoting", func() bool { return got.count() == 1 })
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("team1/events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("team1/events not readable over Kafka")
		}
		if fs.NumRecords() > 0 {
			if v := string(fs.Records()[0].Value); v != "in team1" {
				t.Fatalf("read %q", v)
			}
			return
		}
	}
}
