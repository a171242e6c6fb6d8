package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// mixedLog writes queue 1 (short-lived) and queue 2 (kept) interleaved,
// nine to one, over many segments, then drops all of queue 1: every
// sealed segment is about 10% live.
func mixedLog(t *testing.T, e *Engine, records int) {
	t.Helper()
	ctx := context.Background()
	_ = e.CreateQueues(ctx, []model.QueueID{1, 2})
	n1 := 0
	for i := 0; i < records; i++ {
		q, payload := model.QueueID(1), make([]byte, 2000)
		if i%10 == 9 {
			q, payload = 2, keptPayload(i/10)
		} else {
			n1++
		}
		if err := e.Append(ctx, []*Record{{Queue: q, Count: 1, Payload: payload, Keys: []Key{{Key: []byte(fmt.Sprint("k", i))}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetStartOffset(1, model.QueueOffset(n1)); err != nil {
		t.Fatal(err)
	}
}

func keptPayload(i int) []byte {
	return append([]byte(fmt.Sprintf("kept-%06d-", i)), bytes.Repeat([]byte{byte(i)}, 1900)...)
}

// checkKept reads queue 2 from the start: every record, byte-identical.
func checkKept(t *testing.T, e *Engine, n int) {
	t.Helper()
	got := 0
	for off := model.QueueOffset(0); off < model.QueueOffset(n); {
		res, err := e.Read(2, off, ReadOptions{})
		if err != nil {
			t.Fatalf("read queue 2 at %d: %v", off, err)
		}
		for _, r := range res.Records {
			if !bytes.Equal(r.Payload, keptPayload(int(r.BaseOffset))) {
				t.Fatalf("record %d differs", r.BaseOffset)
			}
			got++
		}
		off = res.NextOffset
		res.Release()
	}
	if got != n {
		t.Fatalf("read %d of %d kept records", got, n)
	}
}

// TestGCRelocatesMixedSegments: segments 10% live are relocated and
// deleted; the log shrinks to about the live data; offsets and bytes of
// the kept records do not change; the result survives a restart, and a
// crash image taken before the old segments were deleted recovers too.
func TestGCRelocatesMixedSegments(t *testing.T) {
	c := smallSegments(t)
	dir := c.Dir
	e := openEngine(t, c)
	mixedLog(t, e, 600)
	if res, err := e.EnforceRetention(); err != nil || res.DeletedSegments != 0 {
		t.Fatalf("retention alone deleted %d mixed segments: %v", res.DeletedSegments, err)
	}
	before := e.LogStats().Bytes
	var live int64
	for _, u := range e.Usage() {
		live += u.Live
	}
	// A crash image with some copies made and repointed but nothing
	// deleted (and no checkpoint since): recovery replays the copies.
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	u := e.Usage()[1]
	if _, _, err := e.relocate(context.Background(), u, newThrottle(0), nil); err != nil {
		t.Fatal(err)
	}
	midway := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", midway).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	nextIndex := e.LogStats().NextIndex
	res, err := e.GC(context.Background(), 0.2)
	if err != nil {
		t.Fatal(err)
	}
	// Copies live in the local area: the replicated record sequence is
	// untouched, and the range served by index has no gap.
	if ls := e.LogStats(); ls.NextIndex != nextIndex || ls.LocalBytes == 0 {
		t.Fatalf("gc moved the record sequence %d → %d (local area %d bytes)", nextIndex, ls.NextIndex, ls.LocalBytes)
	}
	if first := e.clog.FirstIndex(); first == 0 {
		t.Fatal("no first index")
	} else if ents, err := e.clog.Entries(first, nextIndex, 1<<30); err != nil || model.Index(len(ents)) != nextIndex-first {
		t.Fatalf("entries [%d, %d): %d, %v", first, nextIndex, len(ents), err)
	}
	after := e.LogStats().Bytes
	if res.Relocated < 8 || res.Deleted < 8 || after > live+int64(c.SegmentSize)+before/10 {
		t.Fatalf("gc %+v: log %d → %d bytes, live %d", res, before, after, live)
	}
	if res.Copied > live+int64(c.SegmentSize) {
		t.Fatalf("copied %d bytes for %d live", res.Copied, live)
	}
	checkKept(t, e, 60)
	recounted(t, e)
	// A second pass finds nothing to do.
	if res2, err := e.GC(context.Background(), 0.2); err != nil || res2.Relocated != 0 {
		t.Fatalf("second pass: %+v %v", res2, err)
	}
	crash := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", crash).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	e.Close()
	e = openEngine(t, c)
	checkKept(t, e, 60)
	recounted(t, e)
	e.Close()
	for _, img := range []string{crash, midway} {
		cc := c
		cc.Dir = img
		ce := openEngine(t, cc)
		checkKept(t, ce, 60)
		recounted(t, ce)
		if img == midway {
			if u := ce.Usage()[1]; u.Live != 0 {
				t.Fatalf("relocated segment still has %d live bytes after recovery", u.Live)
			}
			if res, err := ce.GC(context.Background(), 0.2); err != nil || res.Deleted < 8 {
				t.Fatalf("gc after recovery: %+v %v", res, err)
			}
			checkKept(t, ce, 60)
		}
		ce.Close()
	}
}

// TestGCRecoversFromDiskGuard: a node whose (simulated) disk filled to the
// guard with mostly dead segments accepts writes again by garbage
// collection alone, which may use the reserve to do it.
func TestGCRecoversFromDiskGuard(t *testing.T) {
	c := testConfig(t.TempDir())
	c.SegmentSize = 1 << 20
	c.MaxRecordSize = 64 << 10
	c.MinFreeBytes = 2 << 20
	const capacity = 12 << 20
	var e *Engine
	c.StatDisk = func() (int64, int64, error) {
		used := int64(0)
		if e != nil && e.clog != nil {
			for _, s := range e.clog.Segments() {
				used += int64(s.End - s.Base)
			}
			used += c.SegmentSize // the active segment is preallocated
		}
		return capacity, capacity - used, nil
	}
	e = openEngine(t, c)
	defer e.Close()
	ctx := context.Background()
	_ = e.CreateQueues(ctx, []model.QueueID{1, 2})
	var n1, n2 int
	for i := 0; ; i++ {
		q, payload := model.QueueID(1), make([]byte, 4000)
		if i%10 == 9 {
			q, payload = 2, keptPayload(n2)
		}
		err := e.Append(ctx, []*Record{{Queue: q, Count: 1, Payload: payload}})
		if errors.Is(err, model.ErrDiskFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if q == 1 {
			n1++
		} else {
			n2++
		}
		if i > 10000 {
			t.Fatal("the guard never refused a write")
		}
	}
	if err := e.SetStartOffset(1, model.QueueOffset(n1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if u, _ := e.DiskUsage(); !u.Full {
		t.Fatal("retention alone got out of the guard: the test needs mixed segments")
	}
	res, err := e.GC(ctx, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := e.DiskUsage(); u.Full {
		t.Fatalf("still full after gc %+v", res)
	}
	if err := e.Append(ctx, []*Record{{Queue: 2, Count: 1, Payload: keptPayload(n2)}}); err != nil {
		t.Fatalf("write after gc: %v", err)
	}
	checkKept(t, e, n2+1)
}

// TestInPlaceListCleared: the list of queues changed in place since the
// last checkpoint is gone after the next checkpoint, also when it was left
// by a crash and read at recovery.
func TestInPlaceListCleared(t *testing.T) {
	c := smallSegments(t)
	e := openEngine(t, c)
	mixedLog(t, e, 200)
	path := filepath.Join(c.Dir, inPlaceName)
	if err := e.SetStartOffset(2, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RewriteRecords(context.Background(), 2, []Rewrite{{Base: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no in-place list after a change: %v", err)
	}
	crash := t.TempDir()
	if out, err := exec.Command("cp", "-a", c.Dir+"/.", crash).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	e.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("in-place list kept after the final checkpoint: %v", err)
	}
	cc := c
	cc.Dir = crash
	ce := openEngine(t, cc)
	if err := ce.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(crash, inPlaceName)); !os.IsNotExist(err) {
		t.Fatalf("in-place list from before the crash kept: %v", err)
	}
	ce.Close()
}

// TestGCThreshold: the frequent pass's threshold — minor alone while
// little is dead, major once half-dead segments would free two segments,
// and under space pressure the least live segments up to three quarters
// live until what stays dead is a sixteenth of the log.
func TestGCThreshold(t *testing.T) {
	const seg = 100
	usage := func(lives ...int64) []SegmentUsage {
		var out []SegmentUsage
		for i, l := range lives {
			out = append(out, SegmentUsage{Base: model.LogPos(i * seg), End: model.LogPos((i + 1) * seg), Live: l, Sealed: true})
		}
		return append(out, SegmentUsage{Base: model.LogPos(len(lives) * seg), End: model.LogPos(len(lives)*seg + 10), Live: 10})
	}
	for _, tc := range []struct {
		name  string
		lives []int64
		want  float64
	}{
		{"nothing dead", []int64{100, 100, 100, 100}, 0.2},
		{"one half-dead segment", []int64{100, 100, 100, 100, 100, 100, 100, 50}, 0.2},
		{"half-dead segments worth two", []int64{40, 45, 30, 35, 100, 100, 100, 100, 100, 100, 100, 100}, 0.5},
		{"exactly interleaved halves", []int64{51, 51, 51, 51, 51, 51, 52, 52, 52, 52}, 0.52 + 1e-9},
		{"a few bytes over half, least live first", []int64{51, 51, 51, 51, 51, 51, 51, 51, 51, 51, 90, 90}, 0.51 + 1e-9},
		{"mostly live", []int64{80, 80, 80, 80, 80, 80, 80, 80}, 0.2},
	} {
		got := gcThreshold(usage(tc.lives...), 0.2, 0.5, seg)
		if got < tc.want-1e-12 || got > tc.want+1e-12 {
			t.Errorf("%s: threshold %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGCHalfLiveSegments: a short-lived queue interleaved half and half
// with a kept one leaves every segment a little over half live once the
// short-lived one expires; the frequent pass still brings the log down to
// about the kept data, and the kept records read back unchanged.
func TestGCHalfLiveSegments(t *testing.T) {
	c := smallSegments(t)
	e := openEngine(t, c)
	defer e.Close()
	ctx := context.Background()
	_ = e.CreateQueues(ctx, []model.QueueID{1, 2})
	const kept = 200
	for i := range kept {
		if err := e.Append(ctx, []*Record{{Queue: 1, Count: 1, Payload: make([]byte, 1850)}}); err != nil {
			t.Fatal(err)
		}
		if err := e.Append(ctx, []*Record{{Queue: 2, Count: 1, Payload: keptPayload(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetStartOffset(1, kept); err != nil {
		t.Fatal(err)
	}
	before := e.LogStats().Bytes
	var live int64
	for _, u := range e.Usage() {
		live += u.Live
	}
	if th := e.cfg.GCMajorThreshold; gcThreshold(e.Usage(), e.cfg.GCMinorThreshold, th, e.cfg.SegmentSize) <= th {
		t.Fatal("half-live segments do not put the log under space pressure")
	}
	res, err := e.scheduledGC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := e.LogStats().Bytes
	t.Logf("gc %+v: log %d → %d bytes, live %d", res, before, after, live)
	if after > live+3*int64(c.SegmentSize) {
		t.Fatalf("log %d → %d bytes with %d live", before, after, live)
	}
	checkKept(t, e, kept)
	recounted(t, e)
	// What stays is not under pressure: the next pass copies nothing.
	if res, err := e.scheduledGC(ctx); err != nil || res.Relocated != 0 {
		t.Fatalf("second pass: %+v %v", res, err)
	}
}
