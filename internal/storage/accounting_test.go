package storage

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// smallSegments is the test configuration with 64 KiB segments (many
// rolls), in a directory of its own.
func smallSegments(t *testing.T) Config {
	c := testConfig(t.TempDir())
	c.SegmentSize = 64 << 10
	c.MaxRecordSize = 8 << 10
	return c
}

// recounted checks that each queue's incremental live bytes equal a
// recount from its entries, and returns them.
func recounted(t *testing.T, e *Engine) map[model.QueueID]string {
	t.Helper()
	out := map[model.QueueID]string{}
	for id, q := range e.queues {
		before := fmt.Sprint(q.idx.Bytes())
		if err := q.idx.RebuildBytes(); err != nil {
			t.Fatal(err)
		}
		if after := fmt.Sprint(q.idx.Bytes()); after != before {
			t.Fatalf("queue %d: counted %s, recount %s", id, before, after)
		}
		out[id] = before
	}
	return out
}

// TestLiveBytesAccounting: live bytes per queue and segment follow appends
// and start moves, add up to the log minus control records, and come back
// exact after a clean restart and after a crash image that replays records
// past the checkpoint.
func TestLiveBytesAccounting(t *testing.T) {
	c := smallSegments(t)
	dir := c.Dir
	e := openEngine(t, c)
	ctx := context.Background()
	_ = e.CreateQueues(ctx, []model.QueueID{1, 2})
	appendN(t, e, 1, 0, 300)
	appendN(t, e, 2, 0, 300)
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 300, 100)
	appendN(t, e, 2, 300, 100)
	var live int64
	for _, u := range e.Usage() {
		if u.Live > int64(u.End-u.Base) {
			t.Fatalf("segment %+v: more live than written", u)
		}
		live += u.Live
	}
	b1, _ := e.QueueBytes(1)
	b2, _ := e.QueueBytes(2)
	pinned := map[model.LogPos]int64{}
	for _, q := range e.queueList() {
		q.pins.bytes(pinned, e.segmentBase, 0)
	}
	for _, n := range pinned {
		live -= n // the queues' creation records
	}
	if live != b1+b2 || live == 0 || live > e.LogStats().Bytes {
		t.Fatalf("live %d, queues %d + %d, log %d", live, b1, b2, e.LogStats().Bytes)
	}
	// A crash image: the log is synced, the index tail since the checkpoint
	// is only in memory, so reopening it replays 200 records.
	crash := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", crash).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	if err := e.SetStartOffset(1, 250); err != nil {
		t.Fatal(err)
	}
	after, _ := e.QueueBytes(1)
	if after >= b1 {
		t.Fatalf("start move freed nothing: %d → %d", b1, after)
	}
	want := recounted(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, c)
	if got := recounted(t, e); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after restart %v, want %v", got, want)
	}
	e.Close()
	cc := c
	cc.Dir = crash
	ce := openEngine(t, cc)
	defer ce.Close()
	got := recounted(t, ce)
	if c1, _ := ce.QueueBytes(1); c1 != b1 {
		t.Fatalf("crash image queue 1: %d bytes, want %d (%v)", c1, b1, got)
	}
}

// TestReclaimDeadSegmentsAnywhere: segments holding only records of a
// queue whose start moved past them are deleted wherever they lie, not
// only at the head of the log; the other queue's records, in segments
// between them, stay readable, also after a restart.
func TestReclaimDeadSegmentsAnywhere(t *testing.T) {
	c := smallSegments(t)
	e := openEngine(t, c)
	ctx := context.Background()
	_ = e.CreateQueues(ctx, []model.QueueID{1, 2})
	big := func(q model.QueueID, n int) {
		for range n {
			if err := e.Append(ctx, []*Record{{Queue: q, Count: 1, Payload: make([]byte, 4000)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 3 { // short-lived blocks of two segments' worth between long-lived ones
		big(1, 40)
		big(2, 5)
	}
	big(1, 20)
	before := e.LogStats()
	if err := e.SetStartOffset(1, 140); err != nil {
		t.Fatal(err)
	}
	res, err := e.EnforceRetention()
	if err != nil {
		t.Fatal(err)
	}
	after := e.LogStats()
	if res.DeletedSegments < 3 || after.Bytes > before.Bytes/2 {
		t.Fatalf("deleted %d segments, log %d → %d bytes", res.DeletedSegments, before.Bytes, after.Bytes)
	}
	if after.Start != before.Start {
		// The first segment holds queue 2's first records too.
		t.Logf("log start moved %d → %d", before.Start, after.Start)
	}
	check := func(e *Engine) {
		t.Helper()
		n := 0
		for off := model.QueueOffset(0); off < 15; {
			res, err := e.Read(2, off, ReadOptions{})
			if err != nil {
				t.Fatalf("read queue 2 at %d: %v", off, err)
			}
			n += len(res.Records)
			off = res.NextOffset
			res.Release()
		}
		if n != 15 {
			t.Fatalf("queue 2 read %d records", n)
		}
		recounted(t, e)
	}
	check(e)
	e.Close()
	e = openEngine(t, c)
	defer e.Close()
	check(e)
	if got := e.LogStats().Segments; got != after.Segments {
		t.Fatalf("%d segments after restart, %d before", got, after.Segments)
	}
}
