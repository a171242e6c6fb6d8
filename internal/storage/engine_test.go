package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

func testConfig(dir string) Config {
	c := DefaultConfig(dir)
	c.SegmentSize = 256 << 10
	c.MaxRecordSize = 64 << 10
	c.IndexFileEntries = 64
	c.KeyIndexSlots = 128
	c.KeyIndexEntries = 512
	c.MinFreeBytes = 0
	c.MinFreeRatio = 0
	c.CheckpointInterval = time.Hour
	c.RetentionInterval = time.Hour
	c.Durability = DurabilitySync
	return c
}

func openEngine(t *testing.T, c Config) *Engine {
	t.Helper()
	e, err := Open(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// crash stops an engine as a killed process would: no final checkpoint,
// only what was written.
func crash(e *Engine) {
	e.cancel()
	e.wg.Wait()
	e.clog.Close()
	e.keys.Close()
	e.idx.Close()
}

func msg(q, i int) []byte {
	return []byte(fmt.Sprintf("q%d-m%06d-%s", q, i, bytes.Repeat([]byte("z"), i%97)))
}

func appendN(t *testing.T, e *Engine, q model.QueueID, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		r := &Record{Queue: q, Count: 1, Payload: msg(int(q), i), Keys: []Key{{Key: []byte(fmt.Sprintf("key-%d-%d", q, i))}}, Timestamp: int64(1000 + i)}
		if err := e.Append(context.Background(), []*Record{r}); err != nil {
			t.Fatal(err)
		}
		if r.BaseOffset != model.QueueOffset(i) {
			t.Fatalf("queue %d message %d got offset %d", q, i, r.BaseOffset)
		}
	}
}

func readAll(t *testing.T, e *Engine, q model.QueueID, from model.QueueOffset) [][]byte {
	t.Helper()
	var out [][]byte
	off := from
	for {
		res, err := e.Read(q, off, ReadOptions{MaxBytes: 4096})
		if err != nil {
			t.Fatalf("read queue %d at %d: %v", q, off, err)
		}
		for _, r := range res.Records {
			out = append(out, append([]byte(nil), r.Payload...))
		}
		next := res.NextOffset
		res.Release()
		if next == off {
			return out
		}
		off = next
	}
}

func TestEngineAppendReadRecover(t *testing.T) {
	dir := t.TempDir()
	c := testConfig(dir)
	e := openEngine(t, c)
	for q := model.QueueID(1); q <= 3; q++ {
		if err := e.CreateQueue(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	for q := model.QueueID(1); q <= 3; q++ {
		appendN(t, e, q, 0, 300)
	}
	verify := func(e *Engine) {
		for q := model.QueueID(1); q <= 3; q++ {
			got := readAll(t, e, q, 0)
			if len(got) != 300 {
				t.Fatalf("queue %d: %d messages", q, len(got))
			}
			for i, b := range got {
				if !bytes.Equal(b, msg(int(q), i)) {
					t.Fatalf("queue %d message %d differs", q, i)
				}
			}
		}
	}
	verify(e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, c) // clean restart from the checkpoint
	verify(e)
	appendN(t, e, 2, 300, 10)
	// Simulate a crash: no final checkpoint, only what was written.
	crash(e)
	e2 := openEngine(t, c)
	defer e2.Close()
	if got := readAll(t, e2, 2, 300); len(got) != 10 {
		t.Fatalf("after crash %d new messages", len(got))
	}
	_, hw, _, _ := e2.Offsets(1)
	if hw != 300 {
		t.Fatalf("hw %d", hw)
	}
	hits := e2.LookupKey([]byte("key-2-305"), 10, 0, 0)
	if len(hits) != 1 || hits[0].Queue != 2 || hits[0].Offset != 305 {
		t.Fatalf("key lookup: %+v", hits)
	}
	if off, _ := e2.OffsetForTime(3, 1150); off != 150 {
		t.Fatalf("offset for time: %d", off)
	}
	if off, _ := e2.OffsetForTime(3, 99999); off != 300 {
		t.Fatalf("offset for future time: %d", off)
	}
}

func TestEngineBatchRecordsAndOutOfRange(t *testing.T) {
	e := openEngine(t, testConfig(t.TempDir()))
	defer e.Close()
	ctx := context.Background()
	_ = e.CreateQueue(ctx, 5)
	var recs []*Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &Record{Queue: 5, Count: 10, Payload: []byte(fmt.Sprint("batch", i))})
	}
	if err := e.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if recs[9].BaseOffset != 90 {
		t.Fatalf("base %d", recs[9].BaseOffset)
	}
	res, err := e.Read(5, 55, ReadOptions{MaxRecords: 2})
	if err != nil || len(res.Records) != 2 || res.Records[0].BaseOffset != 50 || res.NextOffset != 70 {
		t.Fatalf("read: %v %+v", err, res)
	}
	res.Release()
	if _, err := e.Read(5, 101, ReadOptions{}); !errors.Is(err, model.ErrOffsetOutOfRange) {
		t.Fatalf("past end: %v", err)
	}
	if res, err := e.Read(5, 100, ReadOptions{}); err != nil || len(res.Records) != 0 {
		t.Fatalf("at end: %v", err)
	}
	if err := e.Append(ctx, []*Record{{Queue: 77, Count: 1}}); !errors.Is(err, model.ErrUnknownQueue) {
		t.Fatalf("unknown queue: %v", err)
	}
	if err := e.SetStartOffset(5, 35); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Read(5, 20, ReadOptions{}); !errors.Is(err, model.ErrOffsetOutOfRange) {
		t.Fatalf("before start: %v", err)
	}
}

func TestEngineLongPoll(t *testing.T) {
	for _, d := range []Durability{DurabilitySync, DurabilityAsync} {
		c := testConfig(t.TempDir())
		c.Durability = d
		e := openEngine(t, c)
		_ = e.CreateQueue(context.Background(), 1)
		_ = e.CreateQueue(context.Background(), 2)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done <- e.Wait(ctx, map[model.QueueID]model.QueueOffset{1: 0, 2: 0})
		}()
		// The waiter is registered (blocked) before the append.
		for q, _ := e.queue(2); ; time.Sleep(time.Millisecond) {
			q.wmu.Lock()
			n := len(q.waiters)
			q.wmu.Unlock()
			if n > 0 {
				break
			}
		}
		appendN(t, e, 2, 0, 1)
		if err := <-done; err != nil {
			t.Fatalf("wait: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		if err := e.Wait(ctx, map[model.QueueID]model.QueueOffset{1: 0}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("idle wait: %v", err)
		}
		cancel()
		e.Close()
	}
}

func TestEngineRetentionDeletesSegments(t *testing.T) {
	c := testConfig(t.TempDir())
	c.SegmentSize = 64 << 10
	c.MaxRecordSize = 8 << 10
	c.RetentionBytes = 128 << 10
	e := openEngine(t, c)
	defer e.Close()
	ctx := context.Background()
	_ = e.CreateQueue(ctx, 1)
	big := bytes.Repeat([]byte("x"), 4000)
	for i := 0; i < 200; i++ {
		if err := e.Append(ctx, []*Record{{Queue: 1, Count: 1, Payload: big}}); err != nil {
			t.Fatal(err)
		}
	}
	before := e.LogStats().Segments
	res, err := e.EnforceRetention()
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedSegments == 0 || e.LogStats().Segments >= before {
		t.Fatalf("nothing deleted: %+v", res)
	}
	start, hw, _, _ := e.Offsets(1)
	if start == 0 || hw != 200 {
		t.Fatalf("start %d hw %d", start, hw)
	}
	if got := readAll(t, e, 1, start); len(got) != int(200-start) {
		t.Fatalf("read %d after retention", len(got))
	}
	if e.LogStats().Bytes > 200<<10 {
		t.Fatalf("log still %d bytes", e.LogStats().Bytes)
	}
}

func TestEngineDiskGuardRefusesWritesKeepsReads(t *testing.T) {
	c := testConfig(t.TempDir())
	e := openEngine(t, c)
	_ = e.CreateQueue(context.Background(), 1)
	appendN(t, e, 1, 0, 5)
	e.Close()
	c.MinFreeBytes = 1 << 62
	e = openEngine(t, c)
	defer e.Close()
	err := e.Append(context.Background(), []*Record{{Queue: 1, Count: 1, Payload: []byte("x")}})
	if !errors.Is(err, model.ErrDiskFull) {
		t.Fatalf("append on full disk: %v", err)
	}
	if got := readAll(t, e, 1, 0); len(got) != 5 {
		t.Fatalf("reads on full disk: %d", len(got))
	}
}

func TestEngineDeleteQueue(t *testing.T) {
	c := testConfig(t.TempDir())
	e := openEngine(t, c)
	ctx := context.Background()
	_ = e.CreateQueue(ctx, 1)
	_ = e.CreateQueue(ctx, 2)
	appendN(t, e, 1, 0, 100)
	if err := e.DeleteQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = openEngine(t, c)
	defer e.Close()
	if ids := e.QueueIDs(); len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("queues after restart: %v", ids)
	}
}

func TestEngineConcurrentAppendersDense(t *testing.T) {
	e := openEngine(t, testConfig(t.TempDir()))
	defer e.Close()
	ctx := context.Background()
	_ = e.CreateQueue(ctx, 1)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := e.Append(ctx, []*Record{{Queue: 1, Count: 1, Payload: msg(g, i)}}); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if got := readAll(t, e, 1, 0); len(got) != 1600 {
		t.Fatalf("%d messages", len(got))
	}
}

// TestEngineSkipTag: records whose tag hash the reader refuses are skipped
// from the index (NextOffset moves past them); untagged records and
// multi-message records are always returned.
func TestEngineSkipTag(t *testing.T) {
	e := openEngine(t, testConfig(t.TempDir()))
	defer e.Close()
	ctx := context.Background()
	_ = e.CreateQueue(ctx, 3)
	hashes := []uint64{7, 9, 0, 7, 9, 9}
	var recs []*Record
	for i, h := range hashes {
		recs = append(recs, &Record{Queue: 3, Count: 1, TagHash: h, Payload: []byte(fmt.Sprint("m", i))})
	}
	recs = append(recs, &Record{Queue: 3, Count: 2, TagHash: 9, Payload: []byte("batch")})
	recs = append(recs, &Record{Queue: 3, Count: 1, TagHash: 9, Payload: []byte("last")})
	if err := e.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	res, err := e.Read(3, 0, ReadOptions{SkipTag: func(h uint64) bool { return h != 7 }})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	var got []string
	for _, r := range res.Records {
		got = append(got, string(r.Payload))
	}
	if fmt.Sprint(got) != "[m0 m2 m3 batch]" || res.NextOffset != 9 {
		t.Fatalf("read %v, next %d", got, res.NextOffset)
	}
}
