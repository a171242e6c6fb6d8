package storage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestCommitGatedVisibility: with a commit gate, appended records stay
// invisible (high watermark, reads, long polls) until the committed end
// passes them; the durable index is reported after each fsync.
func TestCommitGatedVisibility(t *testing.T) {
	c := testConfig(t.TempDir())
	c.CommitGated = true
	var durable atomic.Uint64
	c.OnDurable = func(i model.Index) { durable.Store(uint64(i)) }
	e := openEngine(t, c)
	defer e.Close()
	ctx := context.Background()
	if err := e.CreateQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 0, 3)
	if _, hw, end, _ := e.Offsets(1); hw != 0 || end != 3 {
		t.Fatalf("before commit: hw %d end %d", hw, end)
	}
	if got := model.Index(durable.Load()); got == 0 || got != e.DurableIndex() {
		t.Fatalf("durable index reported %d, engine %d", got, e.DurableIndex())
	}
	woke := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		woke <- e.Wait(wctx, map[model.QueueID]model.QueueOffset{1: 0})
	}()
	pos, err := e.clog.PositionOf(e.clog.LastIndex())
	if err != nil {
		t.Fatal(err)
	}
	r, v, err := e.clog.ReadRecord(pos)
	if err != nil {
		t.Fatal(err)
	}
	v.Release()
	e.SetCommitted(pos + model.LogPos(r.Length))
	if err := <-woke; err != nil {
		t.Fatalf("long poll: %v", err)
	}
	if _, hw, _, _ := e.Offsets(1); hw != 3 {
		t.Fatalf("after commit: hw %d", hw)
	}
	res, err := e.Read(1, 0, ReadOptions{})
	if err != nil || len(res.Records) != 3 {
		t.Fatalf("read after commit: %v", err)
	}
	res.Release()
}
