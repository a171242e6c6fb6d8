package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFranzListOffsetsDeleteRecordsProducers covers ListOffsets (earliest,
// latest, by timestamp, max timestamp), OffsetForLeaderEpoch, DeleteRecords
// and DescribeProducers through kadm.
func TestFranzListOffsetsDeleteRecordsProducers(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "offs"); err != nil {
		t.Fatal(err)
	}
	p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("offs")) // idempotent by default
	base := time.Now().Add(-time.Hour).UnixMilli()
	for i := 0; i < 10; i++ {
		ts := base + int64(i)*1000
		if i == 7 {
			ts = base + 100_000 // the largest timestamp, not the last record
		}
		r := &kgo.Record{Value: []byte{byte(i)}, Timestamp: time.UnixMilli(ts)}
		if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, lo kadm.ListedOffsets, err error, want int64) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		o, ok := lo.Lookup("offs", 0)
		if !ok || o.Err != nil || o.Offset != want {
			t.Fatalf("%s: %+v, want offset %d", name, o, want)
		}
	}
	lo, err := adm.ListStartOffsets(ctx, "offs")
	check("start", lo, err, 0)
	lo, err = adm.ListEndOffsets(ctx, "offs")
	check("end", lo, err, 10)
	lo, err = adm.ListOffsetsAfterMilli(ctx, base+3500, "offs")
	check("after time", lo, err, 4)
	lo, err = adm.ListMaxTimestampOffsets(ctx, "offs")
	check("max timestamp", lo, err, 7)

	var req kadm.OffsetForLeaderEpochRequest
	req.Add("offs", 0, 0)
	ep, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if e := ep["offs"][0]; e.Err != nil || e.EndOffset != 10 {
		t.Fatalf("offset for leader epoch: %+v", e)
	}

	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "offs", Partition: 0, At: 6})
	dr, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := dr.Lookup("offs", 0); !ok || r.Err != nil || r.LowWatermark != 6 {
		t.Fatalf("delete records: %+v", r)
	}
	lo, err = adm.ListStartOffsets(ctx, "offs")
	check("start after delete", lo, err, 6)

	dp, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"offs": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	producers := 0
	dp.EachProducer(func(d kadm.DescribedProducer) {
		producers++
		if d.LastSequence != 9 {
			t.Fatalf("producer last sequence %d, want 9", d.LastSequence)
		}
	})
	if producers != 1 {
		t.Fatalf("%d producers described", producers)
	}
}

// TestFranzLogAppendTime checks that a LogAppendTime topic stamps batches
// with the broker's time and that clients accept the rewritten batches.
func TestFranzLogAppendTime(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, 30*time.Second)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	typ := "LogAppendTime"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"message.timestamp.type": &typ}, "lat"); err != nil {
		t.Fatal(err)
	}
	p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("lat"), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	old := time.Now().Add(-24 * time.Hour)
	before := time.Now().Add(-time.Second)
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x"), Timestamp: old}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("lat"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for {
		fs := c.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		if fs.NumRecords() == 0 {
			continue
		}
		r := fs.Records()[0]
		if r.Timestamp.Before(before) || r.Attrs.TimestampType() != 1 {
			t.Fatalf("timestamp %v (type %d), want the append time", r.Timestamp, r.Attrs.TimestampType())
		}
		return
	}
}
