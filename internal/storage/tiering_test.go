package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/tier"
	"github.com/rosettamq/rosetta/internal/storage/tier/s3bucket"
)

// testBucket starts an in-process S3 server on loopback with a bucket.
func testBucket(t *testing.T) *s3bucket.Bucket {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	b, err := s3bucket.New(t.Context(), s3bucket.Config{Endpoint: srv.URL, Bucket: "tier", Prefix: "test/", AccessKey: "a", SecretKey: "s", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreateBucket(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b
}

func tierConfig(dir string, b tier.Bucket) Config {
	c := testConfig(dir)
	c.SegmentSize = 64 << 10
	c.MaxRecordSize = 16 << 10
	c.IndexFileEntries = 1024
	c.GCMinorInterval, c.GCMajorInterval = -1, -1
	c.Tier = &TierConfig{Bucket: b, KeyPrefix: "g1/", UploadInterval: 1 << 40, ChunkBytes: 8 << 10, CacheBytes: 64 << 10}
	return c
}

func listKeys(t *testing.T, b tier.Bucket) []string {
	t.Helper()
	var keys []string
	if err := b.List(t.Context(), "", func(o tier.ObjectInfo) bool { keys = append(keys, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestTieringRoundTrip: sealed segments go to the bucket, leave local disk,
// and every record still reads back byte for byte — through a small cache,
// after a restart, with the keys of tiered records still findable; a
// restart uploads nothing twice.
func TestTieringRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := testBucket(t)
	c := tierConfig(dir, b)
	e := openEngine(t, c)
	queues := []model.QueueID{3, 5, 9}
	if err := e.CreateQueues(ctx, queues); err != nil {
		t.Fatal(err)
	}
	const n = 900
	for i := range n {
		for _, q := range queues {
			appendN(t, e, q, i, 1)
		}
	}
	want := map[model.QueueID][][]byte{}
	for _, q := range queues {
		for i := range n {
			want[q] = append(want[q], msg(int(q), i))
		}
	}
	uploaded, err := e.UploadSealed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	segs := e.TieredSegments()
	if uploaded < 3 || len(segs) != uploaded || len(listKeys(t, b)) != uploaded {
		t.Fatalf("uploaded %d, manifest %d, bucket %d", uploaded, len(segs), len(listKeys(t, b)))
	}
	if again, _ := e.UploadSealed(ctx); again != 0 {
		t.Fatalf("uploaded %d segments twice", again)
	}
	res, err := e.EnforceRetention()
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedSegments != uploaded {
		t.Fatalf("deleted %d local segments of %d tiered", res.DeletedSegments, uploaded)
	}
	if len(e.clog.Segments()) != 1 {
		t.Fatalf("%d segments left locally", len(e.clog.Segments()))
	}
	check := func(e *Engine) {
		t.Helper()
		for _, q := range queues {
			got := readAll(t, e, q, 0)
			if len(got) != n {
				t.Fatalf("queue %d: read %d of %d", q, len(got), n)
			}
			for i := range got {
				if !bytes.Equal(got[i], want[q][i]) {
					t.Fatalf("queue %d message %d differs", q, i)
				}
			}
		}
		if hits := e.LookupKey([]byte("key-5-3"), 4, 0, 1<<62); len(hits) != 1 || hits[0].Offset != 3 {
			t.Fatalf("key of a tiered record: %+v", hits)
		}
	}
	check(e)
	st := e.TierStats()
	t.Logf("tiered %d segments; cold reads %d (%d bytes), cache hits %d, misses %d", uploaded, st.ColdReads.Load(), st.ColdReadBytes.Load(), st.CacheHits.Load(), st.CacheMisses.Load())
	if st.ColdReads.Load() == 0 || st.CacheHits.Load() == 0 {
		t.Fatalf("cold reads %d, cache hits %d", st.ColdReads.Load(), st.CacheHits.Load())
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = openEngine(t, c)
	if len(e.TieredSegments()) != uploaded {
		t.Fatalf("restart restored %d tiered segments of %d", len(e.TieredSegments()), uploaded)
	}
	if again, _ := e.UploadSealed(ctx); again != 0 {
		t.Fatalf("restart uploaded %d segments again", again)
	}
	check(e)
	appendN(t, e, 3, n, 1)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	// Without a bucket, tiered records are unavailable — not lost, not
	// served wrong.
	c.Tier = nil
	e = openEngine(t, c)
	defer e.Close()
	if len(e.TieredSegments()) != uploaded {
		t.Fatalf("a node without a bucket forgot %d tiered segments", uploaded-len(e.TieredSegments()))
	}
	if _, err := e.Read(3, 0, ReadOptions{}); !errors.Is(err, model.ErrTierUnavailable) {
		t.Fatalf("read of a tiered record without a bucket: %v", err)
	}
}

// TestTieringRefusesBadObject: an object whose bytes differ from what the
// commit record says is never served.
func TestTieringRefusesBadObject(t *testing.T) {
	ctx := context.Background()
	b := testBucket(t)
	e := openEngine(t, tierConfig(t.TempDir(), b))
	defer e.Close()
	if err := e.CreateQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 0, 600)
	if _, err := e.UploadSealed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	first := e.TieredSegments()[0]
	// Replace the first object with another of the right size.
	if err := b.Delete(ctx, first.Key); err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{7}, int(first.Size))
	if err := b.Create(ctx, first.Key, first.Size, bytes.NewReader(junk)); err != nil {
		t.Fatal(err)
	}
	_, err := e.Read(1, 0, ReadOptions{})
	if !errors.Is(err, model.ErrTierUnavailable) || !strings.Contains(err.Error(), "bad object") {
		t.Fatalf("read of a replaced object: %v", err)
	}
}

// TestTieringRetentionAndSweep: once a queue's start passes what tiered
// segments hold, they are dropped from the manifest and the sweep deletes
// their objects — and orphans of Rosetta's key form past the grace period
// — while objects it did not write stay.
func TestTieringRetentionAndSweep(t *testing.T) {
	ctx := context.Background()
	b := testBucket(t)
	e := openEngine(t, tierConfig(t.TempDir(), b))
	defer e.Close()
	for _, q := range []model.QueueID{1, 2} {
		if err := e.CreateQueue(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1500 {
		appendN(t, e, 1, i, 1)
		appendN(t, e, 2, i, 1)
	}
	if _, err := e.UploadSealed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	tiered := len(e.TieredSegments())
	for _, k := range []string{"g1/00000000000000000001-99", "g1/notes.txt", "g2/00000000000000000001-1"} {
		if err := b.Create(ctx, k, 1, bytes.NewReader([]byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	// Queue 1's old records expire: segments holding only them and queue
	// 2's are still needed for queue 2.
	if err := e.SetStartOffset(1, 1500); err != nil {
		t.Fatal(err)
	}
	if n, err := e.DropExpiredTiered(ctx); err != nil || n != 0 {
		t.Fatalf("dropped %d segments queue 2 still needs: %v", n, err)
	}
	if err := e.SetStartOffset(2, 1000); err != nil {
		t.Fatal(err)
	}
	n, err := e.DropExpiredTiered(ctx)
	if err != nil || n == 0 || n >= tiered {
		t.Fatalf("dropped %d of %d tiered segments: %v", n, tiered, err)
	}
	got := readAll(t, e, 2, 1000)
	if len(got) != 500 || !bytes.Equal(got[0], msg(2, 1000)) {
		t.Fatalf("queue 2 from 1000: %d messages", len(got))
	}
	if res, err := e.SweepBucket(ctx, time.Hour); err != nil || res.Deleted != 0 {
		t.Fatalf("a sweep with an hour's grace deleted %d young objects: %v", res.Deleted, err)
	}
	res, err := e.SweepBucket(ctx, -time.Minute)
	if err != nil || res.Deleted != n+1 || res.Foreign != 1 {
		t.Fatalf("sweep %+v (want %d deleted, 1 foreign): %v", res, n+1, err)
	}
	keys := listKeys(t, b)
	if len(keys) != tiered-n+2 {
		t.Fatalf("bucket holds %v", keys)
	}
	// Restart: the drop is durable.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, tierConfig(e.cfg.Dir, b))
	if len(e.TieredSegments()) != tiered-n {
		t.Fatalf("after restart %d tiered segments, want %d", len(e.TieredSegments()), tiered-n)
	}
	if got := readAll(t, e, 2, 1000); len(got) != 500 {
		t.Fatalf("after restart queue 2 from 1000: %d messages", len(got))
	}
}

// downBucket is a bucket that can be switched off: every call then fails as
// an unreachable store does.
type downBucket struct {
	tier.Bucket
	down atomic.Bool
}

func (b *downBucket) Create(ctx context.Context, key string, size int64, body io.Reader) error {
	if b.down.Load() {
		return fmt.Errorf("%w: connection refused", tier.ErrStoreUnavailable)
	}
	return b.Bucket.Create(ctx, key, size, body)
}

func (b *downBucket) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if b.down.Load() {
		return nil, fmt.Errorf("%w: connection refused", tier.ErrStoreUnavailable)
	}
	return b.Bucket.ReadRange(ctx, key, off, n)
}

// TestTieringStoreDownFillsToGuard: with the store down nothing is deleted
// locally, so appends go on until the disk guard refuses them (never a
// loss); once the store is back, uploads and local deletion make room and
// appends are accepted again, every record readable.
func TestTieringStoreDownFillsToGuard(t *testing.T) {
	ctx := context.Background()
	b := &downBucket{Bucket: testBucket(t)}
	c := tierConfig(t.TempDir(), b)
	var e *Engine
	const disk = 1 << 20
	c.StatDisk = func() (int64, int64, error) {
		used := int64(0)
		if e != nil {
			// Each segment file takes about a segment: preallocated, or
			// sealed nearly full.
			used = int64(len(e.clog.Segments())) * c.SegmentSize
		}
		return disk, disk - used, nil
	}
	c.MinFreeBytes = 256 << 10
	e = openEngine(t, c)
	defer e.Close()
	if err := e.CreateQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b.down.Store(true)
	appended := 0
	for ; appended < 20000; appended++ {
		r := &Record{Queue: 1, Count: 1, Payload: msg(1, appended)}
		err := e.Append(ctx, []*Record{r})
		if errors.Is(err, model.ErrDiskFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if appended%100 == 0 {
			if _, err := e.UploadSealed(ctx); err != nil && !errors.Is(err, tier.ErrStoreUnavailable) {
				t.Fatalf("upload with the store down: %v", err)
			}
			if _, err := e.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if appended == 20000 || len(e.TieredSegments()) != 0 {
		t.Fatalf("%d appended, %d segments tiered with the store down", appended, len(e.TieredSegments()))
	}
	if !e.TierBehind() || e.TierFreeable() {
		t.Fatalf("store down: behind %v, freeable %v", e.TierBehind(), e.TierFreeable())
	}
	b.down.Store(false)
	// Upload passes until every sealed segment is in the bucket (one
	// sealed last may wait for its fsync).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := e.UploadSealed(ctx); err != nil {
			t.Fatal(err)
		}
		if !e.TierBehind() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sealed segments still waiting for the bucket")
		}
	}
	// Uploaded, still local: the guard's next pass frees them (a leader
	// hands nothing off meanwhile).
	if !e.TierFreeable() {
		t.Fatal("uploaded segments not reported still local")
	}
	if _, err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if e.TierFreeable() {
		t.Fatal("tiered segments still local after the retention pass at the guard")
	}
	if err := e.Append(ctx, []*Record{{Queue: 1, Count: 1, Payload: msg(1, appended)}}); err != nil {
		t.Fatalf("append after the store came back: %v", err)
	}
	got := readAll(t, e, 1, 0)
	if len(got) != appended+1 {
		t.Fatalf("read %d of %d records", len(got), appended+1)
	}
	for i, p := range got {
		if !bytes.Equal(p, msg(1, i)) {
			t.Fatalf("record %d differs", i)
		}
	}
}

// TestTieringConcurrentUploads: upload passes started together (the loop's
// and the admin API's) upload each segment once.
func TestTieringConcurrentUploads(t *testing.T) {
	ctx := context.Background()
	e := openEngine(t, tierConfig(t.TempDir(), testBucket(t)))
	defer e.Close()
	if err := e.CreateQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 0, 1500)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.UploadSealed(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if st := e.TierStatus(); st.UploadedSegments != int64(st.Segments) || st.Segments < 2 {
		t.Fatalf("%d segments tiered, %d uploads", st.Segments, st.UploadedSegments)
	}
}

// TestTieringOptOut: a queue the filter leaves out never reaches the
// bucket; its records outlive the tiered segments' local files (moved to
// the local area) and read back with the tiered queue's, also after a
// restart. With AwaitFilter nothing is uploaded before a filter is set.
func TestTieringOptOut(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := testBucket(t)
	c := tierConfig(dir, b)
	c.Tier.AwaitFilter = true
	e := openEngine(t, c)
	const tiered, local = model.QueueID(3), model.QueueID(5)
	if err := e.CreateQueues(ctx, []model.QueueID{tiered, local}); err != nil {
		t.Fatal(err)
	}
	const n = 600
	for i := range n {
		appendN(t, e, tiered, i, 1)
		appendN(t, e, local, i, 1)
	}
	if up, err := e.UploadSealed(ctx); err != nil || up != 0 {
		t.Fatalf("uploaded %d segments (%v) before a filter was set", up, err)
	}
	e.SetTierFilter(func(q model.QueueID) bool { return q != local })
	up, err := e.UploadSealed(ctx)
	if err != nil || up < 2 || len(e.TieredSegments()) != up {
		t.Fatalf("uploaded %d segments, %d committed: %v", up, len(e.TieredSegments()), err)
	}
	for _, s := range e.TieredSegments() {
		if s.holds(local) || !s.holds(tiered) {
			t.Fatalf("tiered segment %d holds %+v", s.Base, s.Queues)
		}
	}
	for _, k := range listKeys(t, b) {
		obj, err := b.ReadRange(ctx, k, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(obj, []byte(fmt.Sprintf("q%d-m", local))) {
			t.Fatalf("object %s holds a record of the left-out queue", k)
		}
	}
	res, err := e.EnforceRetention()
	if err != nil || res.DeletedSegments != up {
		t.Fatalf("deleted %d local segments of %d tiered: %v", res.DeletedSegments, up, err)
	}
	check := func(e *Engine) {
		t.Helper()
		for _, q := range []model.QueueID{tiered, local} {
			got := readAll(t, e, q, 0)
			if len(got) != n {
				t.Fatalf("queue %d: read %d of %d", q, len(got), n)
			}
			for i := range got {
				if !bytes.Equal(got[i], msg(int(q), i)) {
					t.Fatalf("queue %d message %d differs", q, i)
				}
			}
		}
	}
	check(e)
	before := e.TierStats().ColdReads.Load()
	if got := readAll(t, e, local, 0); len(got) != n || e.TierStats().ColdReads.Load() != before {
		t.Fatalf("reading the left-out queue took %d cold reads", e.TierStats().ColdReads.Load()-before)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, c)
	check(e)
}
