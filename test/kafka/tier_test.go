package kafka_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func tieredValue(p, i int) []byte {
	return append(fmt.Appendf(nil, "p%d-%06d|", p, i), bytes.Repeat([]byte{byte(i), byte(p)}, 400+i%200)...)
}

// TestTieredHistoryReadsBack: with local retention at zero, every sealed
// segment goes to the bucket and leaves local disk; a consumer group from
// the start then reads every record back byte-exact from the bucket, in one
// fetch session spanning every partition — and again after a restart.
func TestTieredHistoryReadsBack(t *testing.T) {
	c := apptest.TestConfig(t.TempDir())
	apptest.WithTestBucket(t, &c)
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
	segments, local := apptest.TierNow(t, n)
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
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{fmt.Sprintf("rosetta_tier_segments %d\n", segments), "rosetta_tier_local_segments 0\n", "rosetta_tier_cold_read_seconds_count "} {
		if !bytes.Contains(metrics, []byte(m)) {
			t.Fatalf("metrics lack %q", m)
		}
	}
	n.Stop(t)
	n = apptest.StartTestNode(t, c)
	if again, _ := apptest.TierSegments(t, n); again != segments {
		t.Fatalf("after restart %d segments tiered, before %d", again, segments)
	}
	post(t, n, "/api/v1/storage/tier/upload")
	if again, _ := apptest.TierSegments(t, n); again != segments {
		t.Fatalf("a restart uploaded again: %d segments, before %d", again, segments)
	}
	consumeAll(n, "from-bucket-after-restart")
}

// TestTieringOptOutTopic: a topic with remote.storage.enable=false (set
// through Kafka) and one with no_tiering (through the admin API) never reach
// the bucket, while a topic beside them does; all three read back
// byte-exact once their shared segments left local disk, and after a
// restart.
func TestTieringOptOutTopic(t *testing.T) {
	c := apptest.TestConfig(t.TempDir())
	bucket := apptest.WithTestBucket(t, &c)
	n := apptest.StartTestNode(t, c)
	ctx := ctxTimeout(t, 3*time.Minute)
	const partitions, perPartition = 2, 700
	cl := newClient(t, n.KafkaAddr(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchMaxBytes(64<<10))
	adm := kadm.NewClient(cl)
	off := "false"
	if _, err := adm.CreateTopic(ctx, partitions, 1, map[string]*string{"remote.storage.enable": &off}, "kafka-local"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, "tiered"); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"name": "api-local", "queues": partitions, "config": map[string]any{"no_tiering": true}})
	resp, err := http.Post("http://"+n.HTTPAddr()+"/api/v1/topics", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("create api-local: %s", resp.Status)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "kafka-local", "tiered", "api-local")
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		for _, cfg := range rc.Configs {
			if cfg.Key == "remote.storage.enable" {
				if want := fmt.Sprint(rc.Name == "tiered"); cfg.MaybeValue() != want {
					t.Fatalf("%s: remote.storage.enable=%s, want %s", rc.Name, cfg.MaybeValue(), want)
				}
			}
		}
	}
	topics := []string{"kafka-local", "tiered", "api-local"}
	value := func(topic string, p, i int) []byte { return append([]byte(topic+"|"), tieredValue(p, i)...) }
	for i := range perPartition {
		for p := range partitions {
			for _, topic := range topics {
				cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Value: value(topic, p, i)}, func(_ *kgo.Record, err error) {
					if err != nil {
						t.Errorf("produce: %v", err)
					}
				})
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	segments, local := apptest.TierNow(t, n)
	if segments < 2 || local != 0 {
		t.Fatalf("%d segments tiered, %d of them still local", segments, local)
	}
	var tieredSeen bool
	for key, obj := range bucket.Objects(t) {
		for _, topic := range []string{"kafka-local", "api-local"} {
			if bytes.Contains(obj, []byte(topic+"|")) {
				t.Fatalf("object %s holds records of %s", key, topic)
			}
		}
		tieredSeen = tieredSeen || bytes.Contains(obj, []byte("tiered|"))
	}
	if !tieredSeen {
		t.Fatal("no object holds the tiered topic's records")
	}
	readAll := func(n *apptest.TestNode) {
		t.Helper()
		for _, topic := range topics {
			cons := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchMaxWait(200*time.Millisecond))
			next := make([]int, partitions)
			for total := 0; total < partitions*perPartition; {
				fs := cons.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("%s: read %v of %d per partition", topic, next, perPartition)
				}
				fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
				fs.EachRecord(func(r *kgo.Record) {
					p := int(r.Partition)
					if int(r.Offset) != next[p] || !bytes.Equal(r.Value, value(topic, p, next[p])) {
						t.Fatalf("%s partition %d offset %d: want offset %d's value", topic, p, r.Offset, next[p])
					}
					next[p]++
					total++
				})
			}
			cons.Close()
		}
	}
	readAll(n)
	n.Stop(t)
	n = apptest.StartTestNode(t, c)
	readAll(n)
}
