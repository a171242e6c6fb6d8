package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDescribeLogDirsSizes: DescribeLogDirs reports what each partition's
// records occupy in the shared log, growing with what is produced to it.
func TestDescribeLogDirsSizes(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("sized"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "sized"); err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 1000)
	for i := range 100 {
		r := &kgo.Record{Value: value, Partition: 0}
		if i%4 == 0 {
			r.Partition = 1
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	dirs, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{"sized": {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[int32]int64{}
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) { sizes[p.Partition] = p.Size })
	})
	if sizes[0] < 75*1000 || sizes[1] < 25*1000 || sizes[0] > 3*sizes[1]+20_000 {
		t.Fatalf("partition sizes %v", sizes)
	}
}
