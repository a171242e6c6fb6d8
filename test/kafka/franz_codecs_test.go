package kafka_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// value is deterministic per (partition key, sequence) so the consumer can
// check every record byte for byte.
func value(i int) []byte {
	h := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
	return bytes.Repeat(h[:], 1+i%5)
}

// TestFranzCodecsByteExact sends 200k records (40k under the race
// detector) through a 16-partition topic with each compression codec and
// reads every one back byte-identical.
func TestFranzCodecsByteExact(t *testing.T) {
	n := startNode(t)
	records := volume(200_000)
	if testing.Short() {
		records = 20_000
	}
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 3*time.Minute)
			topic := "codec-" + name
			if _, err := adm.CreateTopic(ctx, 16, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec),
				kgo.ProducerLinger(5*time.Millisecond))
			var wg sync.WaitGroup
			var perr error
			var mu sync.Mutex
			for i := 0; i < records; i++ {
				wg.Add(1)
				p.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: value(i)}, func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						mu.Lock()
						perr = err
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if perr != nil {
				t.Fatalf("produce: %v", perr)
			}
			c := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			seen := make([]bool, records)
			got := 0
			for got < records {
				fs := c.PollFetches(ctx)
				if err := fs.Err0(); err != nil {
					t.Fatalf("poll after %d: %v", got, err)
				}
				fs.EachRecord(func(r *kgo.Record) {
					var i int
					fmt.Sscan(string(r.Key), &i)
					if i < 0 || i >= records || seen[i] {
						t.Fatalf("unexpected or duplicate key %q", r.Key)
					}
					if !bytes.Equal(r.Value, value(i)) {
						t.Fatalf("record %d differs", i)
					}
					seen[i] = true
					got++
				})
			}
		})
	}
}

func TestFranzAdmin(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	ret := "3600000"
	resp, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"retention.ms": &ret}, "admin-topic")
	if err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "admin-topic"); err == nil {
		t.Fatal("duplicate create succeeded")
	}
	td, err := adm.ListTopics(ctx, "admin-topic")
	if err != nil || len(td["admin-topic"].Partitions) != 3 {
		t.Fatalf("list: %v %+v", err, td)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "admin-topic")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc[0].Configs {
		if c.Key == "retention.ms" && c.MaybeValue() == "3600000" {
			found = true
		}
	}
	if !found {
		t.Fatalf("retention.ms not described: %+v", rc[0].Configs)
	}
	newRet := "7200000"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &newRet}}, "admin-topic"); err != nil {
		t.Fatal(err)
	}
	rc, _ = adm.DescribeTopicConfigs(ctx, "admin-topic")
	for _, c := range rc[0].Configs {
		if c.Key == "retention.ms" && c.MaybeValue() != "7200000" {
			t.Fatalf("retention.ms after alter: %s", c.MaybeValue())
		}
	}
	if _, err := adm.CreatePartitions(ctx, 2, "admin-topic"); err != nil {
		t.Fatal(err)
	}
	td, _ = adm.ListTopics(ctx, "admin-topic")
	if len(td["admin-topic"].Partitions) != 5 {
		t.Fatalf("partitions after grow: %d", len(td["admin-topic"].Partitions))
	}
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		t.Fatal(err)
	}
	if dr, err := adm.DeleteTopics(ctx, "admin-topic"); err != nil || dr["admin-topic"].Err != nil {
		t.Fatalf("delete: %v %+v", err, dr)
	}
	td, _ = adm.ListTopics(ctx)
	if _, ok := td["admin-topic"]; ok {
		t.Fatal("topic still listed after delete")
	}
	_ = context.Background
}
