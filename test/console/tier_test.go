package console_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestConsoleTieredStorage: the storage page says what is local and what
// is in the bucket once segments were tiered and left local disk, and a
// topic's queues say from which offset they are local.
func TestConsoleTieredStorage(t *testing.T) {
	exe := chromium(t)
	cfg := apptest.TestConfig(t.TempDir())
	apptest.WithTestBucket(t, &cfg)
	n := apptest.StartTestNode(t, cfg)
	base := "http://" + n.HTTPAddr()
	post(t, base+"/api/v1/topics", map[string]any{"name": "history", "queues": 2})
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("history"), kgo.ProducerBatchMaxBytes(64<<10),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 3000 {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: bytes.Repeat([]byte{'v'}, 1000)}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if segments, local := apptest.TierNow(t, n); segments < 2 || local != 0 {
		t.Fatalf("%d segments tiered, %d still local", segments, local)
	}
	br := openBrowser(t, exe, "console-tier")
	br.do("storage", chromedp.Navigate(base+"/#/storage"))
	page := br.waitFor("bucket only")
	br.shot("storage")
	br.do("topic", chromedp.Navigate(base+"/#/topics/history"))
	topic := strings.ToLower(br.waitFor("LOCAL FROM")) // headers are upper-cased by the style sheet
	for what, got := range map[string][]string{
		"storage": {strings.ToLower(page), "where the log is", "the bucket only", "tiered segments", "g0/"},
		"topic":   {topic, "in the bucket only", "messages"},
	} {
		for _, want := range got[1:] {
			if !strings.Contains(got[0], want) {
				t.Errorf("%s page lacks %q:\n%s", what, want, got[0])
			}
		}
	}
}
