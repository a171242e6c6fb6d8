package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCompactionLatestPerKey: a compacted topic fed 100,000 updates
// (20,000 under the race detector) over 1,000 keys, then tombstones (ten
// older than delete.retention.ms, ten recent), reads back from the start —
// through franz-go and kcat — as exactly the latest value of each live key
// at its original offset plus the unexpired tombstones; uncompressed and
// compressed.
func TestCompactionLatestPerKey(t *testing.T) {
	n := startNode(t)
	for _, codec := range []struct {
		name string
		c    kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"zstd", kgo.ZstdCompression()}, {"lz4", kgo.Lz4Compression()}} {
		t.Run(codec.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 2*time.Minute)
			topic := "compacted-" + codec.name
			cl := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec.c),
				kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(32<<10))
			policy := "compact"
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &policy}, topic); err != nil {
				t.Fatal(err)
			}
			const keys = 1000
			updates := volume(100_000)
			want := map[string]string{}   // key → latest value
			wantOff := map[string]int64{} // key → its offset
			off := int64(0)
			produce := func(r *kgo.Record) {
				cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
					if err != nil {
						t.Error(err)
					}
				})
				k := string(r.Key)
				if r.Value == nil {
					want[k] = "<tombstone>"
				} else {
					want[k] = string(r.Value)
				}
				wantOff[k] = off
				off++
			}
			for i := range updates {
				k := fmt.Sprintf("key-%04d", i%keys)
				produce(&kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("%s=%d", k, i))})
			}
			old := time.Now().Add(-48 * time.Hour)
			for i := range 10 { // expired tombstones: gone
				produce(&kgo.Record{Key: []byte(fmt.Sprintf("key-%04d", i)), Timestamp: old})
			}
			for i := 10; i < 20; i++ { // recent tombstones: kept
				produce(&kgo.Record{Key: []byte(fmt.Sprintf("key-%04d", i))})
			}
			produce(&kgo.Record{Key: []byte("key-0500"), Value: []byte("key-0500=last")})
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				delete(want, fmt.Sprintf("key-%04d", i))
			}
			post(t, n, "/api/v1/storage/compact")

			rd := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := map[string]string{}
			count := 0
			for count < len(want) {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				fs := rd.PollFetches(pctx)
				timedOut := pctx.Err() != nil
				cancel()
				if timedOut {
					t.Fatalf("read %d of %d records after compaction", count, len(want))
				}
				fs.EachRecord(func(r *kgo.Record) {
					k, v := string(r.Key), string(r.Value)
					if r.Value == nil {
						v = "<tombstone>"
					}
					if _, dup := got[k]; dup {
						t.Fatalf("key %s twice (offset %d)", k, r.Offset)
					}
					if wantOff[k] != r.Offset {
						t.Fatalf("key %s at offset %d, produced at %d", k, r.Offset, wantOff[k])
					}
					got[k] = v
					count++
				})
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("key %s: %q, want %q", k, got[k], v)
				}
			}
			{
				kcat := requireTool(t, "kcat")
				out := run(t, 30*time.Second, "", kcat, "-b", n.KafkaAddr(), "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-Z", "-f", "%k=%s\\n")
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if len(lines) != len(want) {
					t.Fatalf("kcat read %d records, want %d", len(lines), len(want))
				}
			}
		})
	}
}
