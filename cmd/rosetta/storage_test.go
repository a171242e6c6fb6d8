package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestStorageTierCommands: rosetta storage tier upload and status on a
// node tiering to an in-process bucket, and on one without tiering.
func TestStorageTierCommands(t *testing.T) {
	c := apptest.TestConfig(t.TempDir())
	apptest.WithTestBucket(t, &c)
	n := apptest.StartTestNode(t, c)
	url := "http://" + n.HTTPAddr()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("tiered"), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3000 {
		cl.Produce(context.Background(), &kgo.Record{Value: bytes.Repeat([]byte{byte(i)}, 1000)}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, url, "storage", "tier", "upload"); code != 0 || !strings.Contains(out, "segments uploaded") || strings.HasPrefix(out, "0 ") {
		t.Fatalf("storage tier upload: %d %s", code, out)
	}
	out, code := run(t, url, "storage", "tier", "status", "--segments")
	if code != 0 || !strings.Contains(out, "in the bucket:") || !strings.Contains(out, "g0/") || !strings.Contains(out, "true") {
		t.Fatalf("storage tier status: %d %s", code, out)
	}
	if out, code := run(t, url, "storage", "tier", "status", "-o", "json"); code != 0 || !strings.Contains(out, `"enabled": true`) {
		t.Fatalf("storage tier status -o json: %d %s", code, out)
	}
	plain := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	if out, code := run(t, "http://"+plain.HTTPAddr(), "storage", "tier", "status"); code != 0 || !strings.Contains(out, "tiering: off") {
		t.Fatalf("storage tier status without tiering: %d %s", code, out)
	}
}
