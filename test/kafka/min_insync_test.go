package kafka_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMinInSyncReplicas checks Kafka's min.insync.replicas on a node of
// one copy: an acks=all produce to a topic asking for two copies in sync
// is refused with NOT_ENOUGH_REPLICAS and nothing is written; acks=1 is
// not checked; the broker-wide default applies to topics without their
// own, and lowering the topic's setting lets acks=all through.
func TestMinInSyncReplicas(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	adm := kadm.NewClient(cl)
	// franz-go rewrites a raw produce's acks to its own setting.
	leaderAck := newClient(t, n.KafkaAddr(), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	two := "2"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"min.insync.replicas": &two}, "isr-topic"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "isr-default"); err != nil {
		t.Fatal(err)
	}
	produce := func(topic string, acks int16) int16 {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = acks, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = rawBatch(-1, -1, -1, "v")
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		via := cl
		if acks == 1 {
			via = leaderAck
		}
		resp, err := req.RequestWith(ctx, via)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	end := func(topic string) int64 {
		t.Helper()
		offs, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(topic, 0)
		return o.Offset
	}
	if code := produce("isr-topic", -1); code != kerr.NotEnoughReplicas.Code {
		t.Fatalf("acks=all with 1 of 2 in sync: code %d", code)
	}
	if e := end("isr-topic"); e != 0 {
		t.Fatalf("a refused produce wrote: end offset %d", e)
	}
	if code := produce("isr-topic", 1); code != 0 {
		t.Fatalf("acks=1: code %d", code)
	}
	if code := produce("isr-default", -1); code != 0 {
		t.Fatalf("acks=all without the setting: code %d", code)
	}
	// The broker-wide default, as Kafka's cluster-wide dynamic config.
	resp, err := adm.AlterBrokerConfigsState(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: &two}})
	if err != nil || resp[0].Err != nil {
		t.Fatalf("set the default: %v %+v", err, resp)
	}
	if code := produce("isr-default", -1); code != kerr.NotEnoughReplicas.Code {
		t.Fatalf("acks=all with the default at 2: code %d", code)
	}
	one := "1"
	if r, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: &one}},
		"isr-topic"); err != nil || r[0].Err != nil {
		t.Fatalf("lower the topic's: %v %+v", err, r)
	}
	if code := produce("isr-topic", -1); code != 0 {
		t.Fatalf("acks=all after lowering the topic's setting: code %d", code)
	}
	// A producer of a real client sees the refusal as the retriable error
	// it is, and gives up when told not to retry.
	p := newClient(t, n.KafkaAddr(), kgo.RecordRetries(0), kgo.DisableIdempotentWrite())
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: "isr-default", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("franz-go producer: %v", err)
	}
	if e := end("isr-topic"); e != 2 {
		t.Fatalf("isr-topic end offset %d, want 2", e)
	}
}
