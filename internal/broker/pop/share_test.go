package pop

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestShareAcquireSettleAndRestart: runs of records are acquired by a
// holder, settled by offset (accept, release, reject, renew) only by their
// holder while locked; a record whose lock ends comes back with its
// delivery count up, and at the delivery limit is archived; after a
// restart held records stay held by their holder until their locks end and
// settled ones never come back. Locks run on the fake clock of a synctest
// bubble.
func TestShareAcquireSettleAndRestart(t *testing.T) { synctest.Test(t, testShareAcquire) }

func testShareAcquire(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("shared")
	top, err := f.b.CreateTopic(ctx, name, 1, broker.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q := top.Queues[0]
	var msgs []model.Message
	for i := range 10 {
		msgs = append(msgs, model.Message{Body: []byte(fmt.Sprint("m", i))})
	}
	if _, err := f.b.AppendMessages(ctx, name, 0, msgs); err != nil {
		t.Fatal(err)
	}
	// A scan that delivers every offset but 6 (as a transaction marker).
	scan := func(from model.QueueOffset, n int) ([]Span, model.QueueOffset, error) {
		var out []Span
		next := from
		for o := from; o < 10 && len(out) < n; o++ {
			if o != 6 {
				out = append(out, Span{o, o})
			}
			next = o + 1
		}
		return out, next, nil
	}
	acq := func(holder uint64, max int) string {
		t.Helper()
		got, err := f.pop.Acquire(ctx, Acquisition{Group: "g", Queue: q, Holder: holder, Max: max, Lock: time.Second,
			DeliveryLimit: 3, Start: func() (model.QueueOffset, error) { return 0, nil }, Scan: scan})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(got)
	}
	if got := acq(1, 4); got != "[{0 3 1}]" {
		t.Fatalf("first acquisition %s", got)
	}
	if got := acq(2, 10); got != "[{4 5 1} {7 9 1}]" {
		t.Fatalf("second acquisition %s", got)
	}
	settle := func(holder uint64, bs ...AckBatch) error {
		return f.pop.Settle(ctx, "g", q, holder, time.Second, bs)
	}
	one := func(first, last model.QueueOffset, typ AckType) AckBatch {
		return AckBatch{First: first, Last: last, Types: []AckType{typ}}
	}
	if err := settle(2, one(0, 0, AckAccept)); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("another holder's record: %v", err)
	}
	if err := settle(1, AckBatch{First: 0, Last: 3, Types: []AckType{AckAccept, AckRelease, AckReject, AckRenew}}); err != nil {
		t.Fatal(err)
	}
	if err := settle(1, one(0, 0, AckAccept)); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("an accepted record: %v", err)
	}
	if err := settle(1, AckBatch{First: 3, Last: 4, Types: []AckType{AckAccept}}, one(2, 2, AckAccept)); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("a batch with another holder's record: %v", err)
	}
	if err := settle(1, one(3, 3, AckAccept), one(3, 3, AckAccept)); !errors.Is(err, ErrInvalidAck) {
		t.Fatalf("overlapping batches: %v", err)
	}
	// The released record 1 is available at once, with its count up.
	if got := acq(3, 10); got != "[{1 1 2}]" {
		t.Fatalf("after release %s", got)
	}
	f.close(t)

	f = open(t, dir)
	// Held records stay held by their holders after a restart.
	if err := settle(1, one(3, 3, AckAccept)); err != nil {
		t.Fatalf("renewed record after restart: %v", err)
	}
	if got := acq(4, 10); got != "[]" {
		t.Fatalf("after restart, within the locks %s", got)
	}
	time.Sleep(1100 * time.Millisecond) // every lock ends
	if got := acq(4, 10); got != "[{1 1 3} {4 5 2} {7 9 2}]" {
		t.Fatalf("after the locks ended %s", got)
	}
	time.Sleep(1100 * time.Millisecond)
	// Record 1 was delivered three times: archived, never again.
	if got := acq(5, 10); got != "[{4 5 3} {7 9 3}]" {
		t.Fatalf("at the delivery limit %s", got)
	}
	if err := settle(5, one(4, 5, AckAccept), one(7, 9, AckAccept)); err != nil {
		t.Fatal(err)
	}
	if start, _, ok := f.pop.Place("g", q); !ok || start != 10 {
		t.Fatalf("start offset %d %v, want 10", start, ok)
	}
	if got := acq(6, 10); got != "[]" {
		t.Fatalf("nothing left %s", got)
	}
	f.close(t)
}

// TestShareReleaseHolder: a holder's records are released at once, its
// other leases and other holders' untouched.
func TestShareReleaseHolder(t *testing.T) {
	ctx := context.Background()
	f := open(t, t.TempDir())
	defer f.close(t)
	name, _ := model.ParseTopicName("released")
	top, err := f.b.CreateTopic(ctx, name, 1, broker.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q := top.Queues[0]
	scan := func(from model.QueueOffset, n int) ([]Span, model.QueueOffset, error) {
		last := min(from+model.QueueOffset(n), 100) - 1
		if last < from {
			return nil, from, nil
		}
		return []Span{{from, last}}, last + 1, nil
	}
	acq := func(holder uint64, max int) []Acquired {
		got, err := f.pop.Acquire(ctx, Acquisition{Group: "g", Queue: q, Holder: holder, Max: max, Lock: time.Hour, Scan: scan,
			Start: func() (model.QueueOffset, error) { return 0, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	acq(1, 10)
	acq(2, 10)
	if n, err := f.pop.ReleaseHolder(ctx, "g", q, 1); err != nil || n != 10 {
		t.Fatalf("released %d %v", n, err)
	}
	if got := fmt.Sprint(acq(3, 30)); got != "[{0 9 2} {20 39 1}]" {
		t.Fatalf("after release %s", got)
	}
	entries := f.pop.Entries(0)
	e2 := &Engine{states: map[key]*state{}}
	if err := e2.Restore(0, entries); err != nil {
		t.Fatal(err)
	}
	if l := e2.states[key{"g", q}].leases[15]; l == nil || l.holder != 2 {
		t.Fatalf("holder after a snapshot round trip: %+v", l)
	}
}

// BenchmarkShareAcquiredMemory reports the heap a million acquired and
// unacknowledged records hold (leases in the engine's state), and the time
// to acquire them 500 at a time (one state record each).
func BenchmarkShareAcquiredMemory(b *testing.B) {
	ctx := context.Background()
	f := open(b, b.TempDir())
	defer f.close(b)
	name, _ := model.ParseTopicName("held")
	top, err := f.b.CreateTopic(ctx, name, 1, broker.TopicConfig{})
	if err != nil {
		b.Fatal(err)
	}
	const held = 1_000_000
	scan := func(from model.QueueOffset, n int) ([]Span, model.QueueOffset, error) {
		last := from + model.QueueOffset(n) - 1
		return []Span{{from, last}}, last + 1, nil
	}
	var perRecord float64
	for i := 0; b.Loop(); i++ {
		group := fmt.Sprint("g", i)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for n := 0; n < held; n += 500 {
			if _, err := f.pop.Acquire(ctx, Acquisition{Group: group, Queue: top.Queues[0], Holder: 1, Max: 500, Lock: time.Hour,
				Scan: scan, Start: func() (model.QueueOffset, error) { return 0, nil }}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perRecord = float64(after.HeapAlloc-before.HeapAlloc) / held
		if err := f.pop.Forget(ctx, group, top.Queues[0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perRecord, "B/held-record")
	b.ReportMetric(perRecord*held/(1<<20), "MiB/million-held")
}
