package kafka_test

import (
	"bytes"
	"context"
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

// storageReport reads GET /api/v1/storage.
func storageReport(t *testing.T, n *apptest.TestNode) (logBytes, liveBytes int64, topics map[string]int64) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/api/v1/storage")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		LogBytes  int64 `json:"log_bytes"`
		LiveBytes int64 `json:"live_bytes"`
		Topics    map[string]struct {
			Bytes int64 `json:"bytes"`
		} `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	topics = map[string]int64{}
	for name, tb := range r.Topics {
		topics[name] = tb.Bytes
	}
	return r.LogBytes, r.LiveBytes, topics
}

// post calls an admin endpoint.
func post(t *testing.T, n *apptest.TestNode, path string) {
	t.Helper()
	resp, err := http.Post("http://"+n.HTTPAddr()+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s %s", path, resp.Status, body)
	}
}

func foreverValue(i int) []byte {
	return append([]byte(fmt.Sprintf("forever-%06d|", i)), bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 700)...)
}

// TestGCShortRetentionInterleavedWithForever: a 1-hour topic interleaved
// with a keep-forever topic in the shared log; once the hour has passed
// (the records' timestamps say so), retention plus garbage collection
// bring the log down to about the keep-forever data, and every
// keep-forever record reads back byte-identical at its offset.
func TestGCShortRetentionInterleavedWithForever(t *testing.T) {
	c := apptest.TestConfig(t.TempDir())
	c.Storage.SegmentSize = 1 << 20
	c.Storage.MaxRecordSize = 256 << 10
	n := apptest.StartTestNode(t, c)
	ctx := ctxTimeout(t, 2*time.Minute)
	cl := newClient(t, n.KafkaAddr(), kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	adm := kadm.NewClient(cl)
	hour, forever := "3600000", "-1"
	for topic, ret := range map[string]*string{"gc-hourly": &hour, "gc-forever": &forever} {
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": ret}, topic); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	const keep = 1500
	for i := range keep {
		for range 9 {
			cl.Produce(ctx, &kgo.Record{Topic: "gc-hourly", Value: bytes.Repeat([]byte{'h'}, 1400), Timestamp: old}, nil)
		}
		cl.Produce(ctx, &kgo.Record{Topic: "gc-forever", Value: foreverValue(i), Timestamp: old}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, _, _ := storageReport(t, n)
	post(t, n, "/api/v1/storage/retention")
	post(t, n, "/api/v1/storage/gc?threshold=0.5")
	after, live, topics := storageReport(t, n)
	foreverBytes := topics["public/default/gc-forever"]
	t.Logf("log %d → %d bytes; live %d, keep-forever topic %d", before, after, live, foreverBytes)
	if foreverBytes == 0 || after > foreverBytes+3*int64(c.Storage.SegmentSize) || after > before/3 {
		t.Fatalf("log %d → %d bytes with %d bytes of keep-forever data", before, after, foreverBytes)
	}
	// Every keep-forever record, byte-identical at its offset.
	readForever(ctx, t, n, "gc-forever", keep)
	starts, err := adm.ListStartOffsets(ctx, "gc-hourly")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := starts.Lookup("gc-hourly", 0); s.Offset != 9*keep {
		t.Fatalf("hourly topic starts at %d", s.Offset)
	}
}

// TestGCReclaimsHalfLiveSegmentsOnItsOwn: a 60-second topic interleaved
// half and half with a keep-forever topic (every segment a little over
// half live once the short one expires); with the default retention and
// garbage-collection settings and no admin call, the log comes down to
// about the keep-forever data within a few minutes (retention every 30 s,
// the frequent GC pass every minute), and the kept records read back.
func TestGCReclaimsHalfLiveSegmentsOnItsOwn(t *testing.T) {
	t.Parallel()
	c := apptest.TestConfig(t.TempDir())
	c.Storage.SegmentSize = 1 << 20
	c.Storage.MaxRecordSize = 256 << 10
	n := apptest.StartTestNode(t, c)
	ctx := ctxTimeout(t, 5*time.Minute)
	cl := newClient(t, n.KafkaAddr(), kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	adm := kadm.NewClient(cl)
	minute, forever := "60000", "-1"
	for topic, ret := range map[string]*string{"gc-minute": &minute, "gc-kept": &forever} {
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": ret}, topic); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Minute) // expired at the next retention check
	const keep = 6000
	for i := range keep {
		cl.Produce(ctx, &kgo.Record{Topic: "gc-minute", Value: bytes.Repeat([]byte{'m'}, 1390), Timestamp: old}, nil)
		cl.Produce(ctx, &kgo.Record{Topic: "gc-kept", Value: foreverValue(i), Timestamp: old}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, _, topics := storageReport(t, n)
	kept := topics["public/default/gc-kept"]
	start := time.Now()
	var after int64
	apptest.Eventually(t, 4*time.Minute, "the expired topic's space back", func() bool {
		time.Sleep(time.Second)
		after, _, _ = storageReport(t, n)
		return after <= kept+3*int64(c.Storage.SegmentSize)
	})
	t.Logf("log %d → %d bytes %v after the writes, with %d bytes of keep-forever data", before, after, time.Since(start).Round(time.Second), kept)
	readForever(ctx, t, n, "gc-kept", keep)
}

// readForever reads a topic of foreverValue records from the start: every
// one of the n, byte-identical at its offset.
func readForever(ctx context.Context, t *testing.T, n *apptest.TestNode, topic string, keep int) {
	t.Helper()
	rd := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < keep {
		fs := rd.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != int64(got) || !bytes.Equal(r.Value, foreverValue(got)) {
				t.Fatalf("record at %d: offset %d, %q…", got, r.Offset, r.Value[:min(20, len(r.Value))])
			}
			got++
		})
	}
}
