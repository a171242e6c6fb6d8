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

// TestLeaderEpochsConsistent checks KIP-101/KIP-320 leader epochs with
// franz-go: Metadata, stored batches, ListOffsets, OffsetForLeaderEpoch and
// the committed leader epoch in OffsetCommit/OffsetFetch agree (epoch 0 on a
// single node), and a request naming another epoch is refused as Kafka does.
func TestLeaderEpochsConsistent(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "epochs"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "epochs", Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	md, err := adm.Metadata(ctx, "epochs")
	if err != nil {
		t.Fatal(err)
	}
	if p := md.Topics["epochs"].Partitions[0]; p.LeaderEpoch != 0 {
		t.Fatalf("metadata leader epoch %d, want 0", p.LeaderEpoch)
	}

	// The consumer group commits with the epoch of the records it consumed.
	c := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("epochs"), kgo.ConsumerGroup("epochs-g"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < 5 {
		fs := c.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			if r.LeaderEpoch != 0 {
				t.Errorf("record %d stored with leader epoch %d", r.Offset, r.LeaderEpoch)
			}
		})
	}
	if err := c.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	fo, err := adm.FetchOffsets(ctx, "epochs-g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fo.Lookup("epochs", 0); !ok || o.At != 5 || o.LeaderEpoch != 0 {
		t.Fatalf("committed offset %+v, want offset 5 epoch 0", o)
	}

	lo, err := adm.ListEndOffsets(ctx, "epochs")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup("epochs", 0); o.Offset != 5 || o.LeaderEpoch != 0 {
		t.Fatalf("list offsets: %+v", o)
	}

	var req kadm.OffsetForLeaderEpochRequest
	req.Add("epochs", 0, 0)
	ep, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if e := ep["epochs"][0]; e.Err != nil || e.LeaderEpoch != 0 || e.EndOffset != 5 {
		t.Fatalf("offset for leader epoch 0: %+v", e)
	}

	// Raw requests naming an epoch the partition does not have.
	for _, tc := range []struct {
		current int32
		want    error
	}{{1, kerr.UnknownLeaderEpoch}} {
		ofle := kmsg.NewPtrOffsetForLeaderEpochRequest()
		ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
		ot.Topic = "epochs"
		op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		op.CurrentLeaderEpoch, op.LeaderEpoch = tc.current, 0
		ot.Partitions = append(ot.Partitions, op)
		ofle.Topics = append(ofle.Topics, ot)
		resp, err := ofle.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); !errors.Is(err, tc.want) {
			t.Fatalf("offset for leader epoch with current %d: %v, want %v", tc.current, err, tc.want)
		}

		fetch := kmsg.NewPtrFetchRequest()
		fetch.MaxWaitMillis, fetch.MaxBytes, fetch.SessionEpoch = 10, 1<<20, -1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = "epochs", md.Topics["epochs"].ID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = tc.current, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)
		fresp, err := fetch.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(fresp.Topics[0].Partitions[0].ErrorCode); !errors.Is(err, tc.want) {
			t.Fatalf("fetch with current epoch %d: %v, want %v", tc.current, err, tc.want)
		}
	}
}
