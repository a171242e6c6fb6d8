package kafka_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestShareGroupLibrdkafka runs librdkafka 2.15's share consumer (the C
// API, test/kafka/interop/rdkafka-share) against a node: three members of
// one group on one partition accept, release and reject. The program is
// built by scripts/rdkafka-share-tests.sh (scripts/test.sh runs it), which
// sets ROSETTA_RDKAFKA_SHARE; without it the test is skipped.
func TestShareGroupLibrdkafka(t *testing.T) {
	bin := os.Getenv("ROSETTA_RDKAFKA_SHARE")
	if bin == "" {
		t.Skip("ROSETTA_RDKAFKA_SHARE not set: run scripts/rdkafka-share-tests.sh")
	}
	n := startNode(t)
	ctx := ctxTimeout(t, 4*time.Minute)
	const topic, group, records = "rdkafka-share", "rdkafka-share-g", 3000
	admCl := newClient(t, n.KafkaAddr())
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, ctx, admCl, group, "share.auto.offset.reset", "earliest")
	prod := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic))
	for i := range records {
		prod.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, n.KafkaAddr(), topic, group, strconv.Itoa(records), "3").CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatal(err)
	}
}
