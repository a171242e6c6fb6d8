package storage

import (
	"context"
	"errors"
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
	crash(e)
	e = openEngine(t, c)
	defer e.Close()
	check(e, 1000, 1003)
	s, _, n, err := e.Offsets(8)
	if err != nil || s != 50 || n != 50 {
		t.Fatalf("queue made before the crash: %d..%d (%v)", s, n, err)
	}
}

// A sealed queue refuses appends (as not led here) and says where it
// ended; the seal outlives a crash, and unsealing opens it again.
func TestSealQueue(t *testing.T) {
	ctx := context.Background()
	c := testConfig(t.TempDir())
	e := openEngine(t, c)
	if err := e.CreateQueue(ctx, 3); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 3, 0, 5)
	end, err := e.SealQueue(ctx, 3)
	if err != nil || end != 5 {
		t.Fatalf("sealed at %d (%v), want 5", end, err)
	}
	refused := func(e *Engine) {
		t.Helper()
		err := e.Append(ctx, []*Record{{Queue: 3, Count: 1, Payload: []byte("late")}})
		if !errors.Is(err, model.ErrQueueMoved) || !errors.Is(err, model.ErrNotLeader) {
			t.Fatalf("append to a sealed queue: %v", err)
		}
		if !e.QueueSealed(3) {
			t.Fatal("queue not reported sealed")
		}
	}
	refused(e)
	if again, err := e.SealQueue(ctx, 3); err != nil || again != 5 {
		t.Fatalf("sealed again at %d (%v)", again, err)
	}
	crash(e)
	e = openEngine(t, c)
	defer e.Close()
	refused(e)
	if got := readAll(t, e, 3, 0); len(got) != 5 {
		t.Fatalf("read %d records of the sealed queue", len(got))
	}
	if err := e.UnsealQueue(ctx, 3); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 3, 5, 1)
}
