package storage

import (
	"context"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// A queue created at an offset (one moved here from another group) starts
// and ends there, numbers its records on from it, and keeps doing so
// after a clean restart and after a crash that left no checkpoint.
func TestCreateQueueAt(t *testing.T) {
	ctx := context.Background()
	c := testConfig(t.TempDir())
	e := openEngine(t, c)
	if err := e.CreateQueueAt(ctx, 7, 1000); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateQueueAt(ctx, 7, 5); err != nil { // existing: unchanged
		t.Fatal(err)
	}
	check := func(e *Engine, start, end model.QueueOffset) {
		t.Helper()
		s, _, n, err := e.Offsets(7)
		if err != nil || s != start || n != end {
			t.Fatalf("offsets %d..%d (%v), want %d..%d", s, n, err, start, end)
		}
	}
	check(e, 1000, 1000)
	if _, err := e.Read(7, 999, ReadOptions{MaxBytes: 4096}); err == nil {
		t.Fatal("read below the start succeeded")
	}
	add := func(e *Engine, want model.QueueOffset) {
		t.Helper()
		r := &Record{Queue: 7, Count: 1, Payload: []byte("moved"), Timestamp: 1}
		if err := e.Append(ctx, []*Record{r}); err != nil {
			t.Fatal(err)
		}
		if r.BaseOffset != want {
			t.Fatalf("appended at %d, want %d", r.BaseOffset, want)
		}
	}
	add(e, 1000)
	add(e, 1001)
	if got := readAll(t, e, 7, 1000); len(got) != 2 {
		t.Fatalf("read %d records", len(got))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, c)
	check(e, 1000, 1002)
	add(e, 1002)
	// A crash: only the log remains past the last checkpoint.
	if err := e.CreateQueueAt(ctx, 8, 50); err != nil {
		t.Fatal(err)
	}
	e.cancel()
	e.wg.Wait()
	e.clog.Close()
	e.keys.Close()
	e.idx.Close()
	e = openEngine(t, c)
	defer e.Close()
	check(e, 1000, 1003)
	s, _, n, err := e.Offsets(8)
	if err != nil || s != 50 || n != 50 {
		t.Fatalf("queue made before the crash: %d..%d (%v)", s, n, err)
	}
}
