package kafka_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceBatches writes each group of timestamps as one batch (one flush
// each) to partition 0 of topic.
func produceBatches(t *testing.T, ctx context.Context, addr, topic string, codec kgo.CompressionCodec, groups [][]int64) {
	t.Helper()
	p := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Minute))
	for _, g := range groups {
		for i, ts := range g {
			p.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("v%d-%d", ts, i)), Timestamp: time.UnixMilli(ts)}, nil)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTimeLookupExactInBatch: ListOffsets by timestamp answers the first
// record at or after the target even inside a multi-record batch, compressed
// or not, through kadm and through librdkafka (kcat -Q); MAX_TIMESTAMP names
// the record carrying the largest timestamp.
func TestTimeLookupExactInBatch(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	// Offsets 0-2 in one batch, 3-4 in the next, 5 alone.
	groups := [][]int64{{1000, 2000, 3000}, {1234, 999999999999}, {4000}}
	cases := []struct {
		at   int64
		want int64
	}{
		{999999999999, 4}, // second record of the second batch
		{1500, 1},         // inside the first batch
		{2500, 2},
		{3001, 4}, // 1234 is older: skipped
		{500, 0},
	}
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	for name, codec := range codecs {
		topic := "tl-" + name
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		produceBatches(t, ctx, n.KafkaAddr(), topic, codec, groups)
		for _, c := range cases {
			lo, err := adm.ListOffsetsAfterMilli(ctx, c.at, topic)
			if err != nil {
				t.Fatal(err)
			}
			o, _ := lo.Lookup(topic, 0)
			if o.Err != nil || o.Offset != c.want {
				t.Fatalf("%s: offset after %d = %d (%v), want %d", name, c.at, o.Offset, o.Err, c.want)
			}
		}
		lo, err := adm.ListMaxTimestampOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := lo.Lookup(topic, 0); o.Err != nil || o.Offset != 4 || o.Timestamp != 999999999999 {
			t.Fatalf("%s: max timestamp at %d (ts %d, %v), want 4", name, o.Offset, o.Timestamp, o.Err)
		}
	}

	kcat := requireTool(t, "kcat")
	offsetRE := regexp.MustCompile(`offset (-?\d+)`)
	for _, name := range []string{"none", "lz4"} {
		for _, c := range cases {
			out := run(t, 30*time.Second, "", kcat, "-b", n.KafkaAddr(), "-Q", "-t", fmt.Sprintf("tl-%s:0:%d", name, c.at))
			m := offsetRE.FindStringSubmatch(out)
			if m == nil || m[1] != fmt.Sprint(c.want) {
				t.Fatalf("kcat -Q tl-%s:0:%d: %q, want offset %d", name, c.at, out, c.want)
			}
		}
	}
}
