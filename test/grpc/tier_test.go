//go:build !race

package grpc_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func tieredBody(i int) []byte {
	return append(fmt.Appendf(nil, "t%05d|", i), bytes.Repeat([]byte{byte(i)}, 600+i%400)...)
}

// TestTieredHistorySimpleConsumer: a RocketMQ 5 SimpleConsumer receives,
// byte-exact, messages whose segments went to the bucket and left local
// disk.
func TestTieredHistorySimpleConsumer(t *testing.T) {
	t.Parallel()
	c := apptest.TestConfig(t.TempDir())
	apptest.WithTestBucket(t, &c)
	n := apptest.StartTestNode(t, c)
	const topic, total = "grpc-tiered", 3000
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(64<<10),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx := context.Background()
	for i := range total {
		kc.Produce(ctx, &kgo.Record{Value: tieredBody(i)}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce %d: %v", i, err)
			}
		})
	}
	if err := kc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if segments, local := apptest.TierNow(t, n); segments < 2 || local != 0 {
		t.Fatalf("%d segments tiered, %d still local", segments, local)
	}
	sc := startSimpleConsumer(t, n.GRPCAddr(), "tier-group", topic)
	got := map[int]bool{}
	deadline := time.Now().Add(2 * time.Minute)
	for len(got) < total && time.Now().Before(deadline) {
		for _, mv := range receive(t, sc, 32, 20*time.Second) {
			var i int
			if _, err := fmt.Sscanf(string(mv.GetBody()), "t%05d|", &i); err != nil || !bytes.Equal(mv.GetBody(), tieredBody(i)) {
				t.Fatalf("received a message that differs from every one sent: %.20q", mv.GetBody())
			}
			got[i] = true
			if err := sc.Ack(ctx, mv); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != total {
		t.Fatalf("received %d of %d tiered messages", len(got), total)
	}
}
