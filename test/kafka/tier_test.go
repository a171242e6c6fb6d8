package kafka_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// tierStatus reads GET /api/v1/storage/tier.
func tierStatus(t *testing.T, n *apptest.TestNode) (segments, local int) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/api/v1/storage/tier")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status struct {
			Segments      int `json:"segments"`
			LocalSegments int `json:"local_segments"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Status.Segments, r.Status.LocalSegments
}

func tieredValue(p, i int) []byte {
	return append(fmt.Appendf(nil, "p%d-%06d|", p, i), bytes.Repeat([]byte{byte(i), byte(p)}, 400+i%200)...)
}

// TestTieredHistoryReadsBack: with local retention at zero, every sealed
// segment goes to the bucket and leaves local disk; a consumer group from
// the start then reads every record back byte-exact from the bucket, in one
// fetch session spanning every partition — and again after a restart.
func TestTieredHistoryReadsBack(t *testing.T) {
	s3 := httptest.NewServer(gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true)).Server())
	defer s3.Close()
	c := apptest.TestConfig(t.TempDir())
	c.Storage.SegmentSize = 1 << 20
	c.Storage.MaxRecordSize = 256 << 10
	tc := &c.Storage.Tier
	tc.Bucket, tc.Endpoint, tc.AccessKey, tc.SecretKey = "tier", s3.URL, "test", "secret"
	tc.LocalRetention, tc.LocalRetentionBytes = 0, 0
	tc.UploadInterval, tc.CacheBytes, tc.ChunkBytes = time.Hour, 2<<20, 256<<10
	n := apptest.StartTestNode(t, c)
	ctx := ctxTimeout(t, 3*time.Minute)
	const topic, partitions, perPartition = "tiered", 4, 1500
	cl := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchMaxBytes(64<<10))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for i := range perPartition {
		for p := range partitions {
			cl.Produce(ctx, &kgo.Record{Partition: int32(p), Value: tieredValue(p, i)}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	post(t, n, "/api/v1/storage/tier/upload")
	post(t, n, "/api/v1/storage/retention")
	segments, local := tierStatus(t, n)
	if segments < 4 || local != 0 {
		t.Fatalf("%d segments tiered, %d of them still local", segments, local)
	}
	t.Logf("%d segments tiered and deleted locally", segments)
	consumeAll := func(n *apptest.TestNode, group string) {
		t.Helper()
		cons := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
		next := make([]int, partitions)
		total := 0
		for total < partitions*perPartition {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %d of %d records: %v", total, partitions*perPartition, next)
			}
			fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
			fs.EachRecord(func(r *kgo.Record) {
				p := int(r.Partition)
				if int(r.Offset) != next[p] || !bytes.Equal(r.Value, tieredValue(p, next[p])) {
					t.Fatalf("partition %d offset %d: want offset %d's value", p, r.Offset, next[p])
				}
				next[p]++
				total++
			})
		}
		cons.Close()
	}
	consumeAll(n, "from-bucket")
	n.Stop(t)
	n = apptest.StartTestNode(t, c)
	if again, _ := tierStatus(t, n); again != segments {
		t.Fatalf("after restart %d segments tiered, before %d", again, segments)
	}
	post(t, n, "/api/v1/storage/tier/upload")
	if again, _ := tierStatus(t, n); again != segments {
		t.Fatalf("a restart uploaded again: %d segments, before %d", again, segments)
	}
	consumeAll(n, "from-bucket-after-restart")
}
