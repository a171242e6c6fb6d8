package kafka_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchWaitsForMinBytes: a fetch returns once MinBytes are available or
// MaxWait passes, whichever is first — not as soon as any byte exists.
func TestFetchWaitsForMinBytes(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("minbytes"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	created, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "minbytes")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte("x"), 1024)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fetch := func(minBytes int32) (time.Duration, int) {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 500, minBytes, 50<<20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "minbytes", created.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 10 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		start := time.Now()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || resp.ErrorCode != 0 {
			t.Fatalf("fetch error %d/%d", resp.ErrorCode, p.ErrorCode)
		}
		return time.Since(start), len(resp.Topics[0].Partitions[0].RecordBatches)
	}
	took, got := fetch(1 << 20)
	if took < 450*time.Millisecond || got == 0 {
		t.Fatalf("MinBytes 1 MiB over 1 KiB answered after %v with %d bytes; want the 500 ms wait, then the data", took, got)
	}
	took, got = fetch(1)
	if took > 400*time.Millisecond || got == 0 {
		t.Fatalf("MinBytes 1 answered after %v with %d bytes; want at once", took, got)
	}
	// Data arriving during the wait completes the fetch once enough is there.
	go func() {
		time.Sleep(100 * time.Millisecond)
		for i := 0; i < 4; i++ {
			_ = cl.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte("y"), 1024)}).FirstErr()
		}
	}()
	took, got = fetch(4 * 1024)
	if got < 4*1024 {
		t.Fatalf("MinBytes 4 KiB answered after %v with %d bytes", took, got)
	}
}
