package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCompactedTopicRefusesNullKeys: a batch holding records without a key
// is refused with INVALID_RECORD naming each such record's index; keyed
// records in other batches are written.
func TestCompactedTopicRefusesNullKeys(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, "compacted"); err != nil {
		t.Fatal(err)
	}
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.ZstdCompression()} {
		p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("compacted"), kgo.ProducerBatchCompression(codec),
			kgo.ProducerLinger(time.Minute), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0))
		// Usually one batch: keyed, null, keyed, null. Records without a
		// key are always refused; keyed ones fail with their batch-mates
		// (or succeed if the client sent them in a batch of their own).
		type result struct {
			keyed bool
			err   error
		}
		results := make(chan result, 4)
		for i, key := range []string{"k0", "", "k2", ""} {
			r := &kgo.Record{Value: []byte{byte(i)}}
			if key != "" {
				r.Key = []byte(key)
			}
			p.Produce(ctx, r, func(r *kgo.Record, err error) { results <- result{r.Key != nil, err} })
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if r := <-results; r.err != kerr.InvalidRecord && (!r.keyed || r.err != nil) {
				t.Fatalf("record (keyed %v) of a batch with null keys: %v, want INVALID_RECORD", r.keyed, r.err)
			}
		}
		// A keyed batch succeeds (flushed: the client lingers a minute).
		var keyedErr error
		p.Produce(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("v")}, func(_ *kgo.Record, err error) { keyedErr = err })
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if keyedErr != nil {
			t.Fatal(keyedErr)
		}
	}
	// The raw response names records 1 and 3.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "compacted"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = keyedBatch([]string{"a", "", "c", ""})
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	pr := resp.Topics[0].Partitions[0]
	if pr.ErrorCode != kerr.InvalidRecord.Code || len(pr.ErrorRecords) != 2 ||
		pr.ErrorRecords[0].RelativeOffset != 1 || pr.ErrorRecords[1].RelativeOffset != 3 {
		t.Fatalf("response: code %d records %+v", pr.ErrorCode, pr.ErrorRecords)
	}
	// Whatever was stored has a key.
	c := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("compacted"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "compacted")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("compacted", 0)
	for read := int64(0); read < end.Offset; {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("compacted topic not readable")
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			if r.Key == nil {
				t.Fatalf("a record without a key was stored at offset %d", r.Offset)
			}
		})
	}
}

// TestSingleNodeReassignmentAnswers: ElectLeaders and partition
// reassignment get honest single-node answers through kadm.
func TestSingleNodeReassignmentAnswers(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "reassign"); err != nil {
		t.Fatal(err)
	}
	el, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"reassign": {0: {}, 1: {}}, "nope": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	for topic, ps := range el {
		for p, r := range ps {
			want := kerr.ElectionNotNeeded
			if topic == "nope" {
				want = kerr.UnknownTopicOrPartition
			}
			if r.Err != want {
				t.Fatalf("elect %s/%d: %v, want %v", topic, p, r.Err, want)
			}
		}
	}
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	self := meta.Brokers[0].NodeID
	var ra kadm.AlterPartitionAssignmentsReq
	ra.Assign("reassign", 0, []int32{self})
	ra.Assign("reassign", 1, []int32{self + 1})
	res, err := adm.AlterPartitionAssignments(ctx, ra)
	if err != nil {
		t.Fatal(err)
	}
	if r := res["reassign"][0]; r.Err != nil {
		t.Fatalf("reassign to this broker: %v", r.Err)
	}
	if r := res["reassign"][1]; r.Err != kerr.InvalidReplicaAssignment {
		t.Fatalf("reassign to an unknown broker: %v", r.Err)
	}
	list, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"reassign": {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	list.Each(func(r kadm.ListPartitionReassignmentsResponse) {
		t.Fatalf("reassignment reported ongoing: %+v", r)
	})
}
