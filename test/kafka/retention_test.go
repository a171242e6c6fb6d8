package kafka_test

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
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

// runRetention asks the node for a retention pass now.
func runRetention(t *testing.T, n *apptest.TestNode) {
	t.Helper()
	resp, err := http.Post("http://"+n.HTTPAddr()+"/api/v1/storage/retention", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retention pass: %s %s", resp.Status, body)
	}
}

// TestTopicRetentionBothWays: retention.ms shorter than the broker's
// default (7 days) drops what is older; longer keeps what the default
// would drop; no setting follows the default; -1 keeps everything;
// retention.bytes bounds each partition. Time is the records' own
// timestamps, as in Kafka.
func TestTopicRetentionBothWays(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr(), kgo.ProducerBatchCompression(kgo.NoCompression()))
	adm := kadm.NewClient(cl)
	hour, month, capped, forever := "3600000", strconv.FormatInt((30*24*time.Hour).Milliseconds(), 10), "20000", "-1"
	for topic, cfg := range map[string]map[string]*string{
		"ret-short": {"retention.ms": &hour}, "ret-long": {"retention.ms": &month}, "ret-default": nil,
		"ret-forever": {"retention.ms": &forever}, "ret-capped": {"retention.bytes": &capped},
	} {
		if _, err := adm.CreateTopic(ctx, 1, 1, cfg, topic); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	produce := func(topic string, n int, ts time.Time) {
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: make([]byte, 1000), Timestamp: ts}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce("ret-short", 20, now.Add(-2*time.Hour))
	produce("ret-short", 10, now)
	produce("ret-long", 20, now.Add(-10*24*time.Hour))
	produce("ret-default", 20, now.Add(-10*24*time.Hour))
	produce("ret-default", 10, now)
	produce("ret-forever", 20, now.Add(-400*24*time.Hour))
	produce("ret-capped", 100, now)
	runRetention(t, n)
	starts, err := adm.ListStartOffsets(ctx, "ret-short", "ret-long", "ret-default", "ret-forever", "ret-capped")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"ret-short": 20, "ret-long": 0, "ret-default": 20, "ret-forever": 0}
	for topic, w := range want {
		if got, _ := starts.Lookup(topic, 0); got.Offset != w {
			t.Errorf("%s starts at %d, want %d", topic, got.Offset, w)
		}
	}
	if got, _ := starts.Lookup("ret-capped", 0); got.Offset < 75 || got.Offset > 90 {
		t.Errorf("ret-capped starts at %d, want about 100 - 20000/record size", got.Offset)
	}
	dirs, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{"ret-capped": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Size > 20000 || p.Size < 15000 {
				t.Errorf("ret-capped holds %d bytes, limit 20000", p.Size)
			}
		})
	})
	// Describe shows the broker default where the topic sets none.
	rc, err := adm.DescribeTopicConfigs(ctx, "ret-default")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc[0].Configs {
		if c.Key == "retention.ms" && c.MaybeValue() != strconv.FormatInt((7*24*time.Hour).Milliseconds(), 10) {
			t.Errorf("default retention.ms described as %s", c.MaybeValue())
		}
	}
}
