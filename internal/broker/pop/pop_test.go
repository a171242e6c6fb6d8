package pop

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

type fixture struct {
	engine *storage.Engine
	meta   *meta.BoltStore
	b      *broker.Broker
	pop    *Engine
}

func open(t testing.TB, dir string) *fixture {
	t.Helper()
	c := storage.DefaultConfig(filepath.Join(dir, "data"))
	c.SegmentSize = 1 << 20
	c.MaxRecordSize = 256 << 10
	c.MinFreeBytes, c.MinFreeRatio = 0, 0
	e, err := storage.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(context.Background(), e, m, broker.Options{AutoCreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{engine: e, meta: m, b: b, pop: p}
}

func (f *fixture) close(t testing.TB) {
	f.pop.Close()
	if err := f.b.Close(); err != nil {
		t.Fatal(err)
	}
	f.engine.Close()
	f.meta.Close()
}

func bodies(ds []Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s@%d", d.Message.Body, d.Attempt))
	}
	return out
}

// TestPopLeasesAcksAndRestart: messages are handed out with a deadline,
// come back with the next attempt when it passes unacknowledged, a stale
// handle is refused, a deadline change postpones, a FIFO queue holds back
// while a message is in flight, and after a restart acknowledged messages
// never return while unacknowledged ones do, once their deadline passes.
// Deadlines run on the fake clock of a synctest bubble.
func TestPopLeasesAcksAndRestart(t *testing.T) { synctest.Test(t, testPopLeases) }

func testPopLeases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("popped")
	top, err := f.b.CreateTopic(ctx, name, 1, broker.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q := []model.QueueID{top.Queues[0]}
	var msgs []model.Message
	for i := range 6 {
		msgs = append(msgs, model.Message{Body: []byte(fmt.Sprint("m", i))})
	}
	if _, err := f.b.AppendMessages(ctx, name, 0, msgs); err != nil {
		t.Fatal(err)
	}
	got, err := f.pop.Receive(ctx, "g", q, 3, 300*time.Millisecond, false, nil)
	if err != nil || fmt.Sprint(bodies(got)) != "[m0@1 m1@1 m2@1]" {
		t.Fatalf("first receive %v %v", bodies(got), err)
	}
	if err := f.pop.Ack(ctx, "g", got[0].Handle); err != nil {
		t.Fatal(err)
	}
	if err := f.pop.Ack(ctx, "g", got[0].Handle); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("second ack: %v", err)
	}
	h2, err := f.pop.ChangeInvisible(ctx, "g", got[2].Handle, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.pop.Ack(ctx, "g", got[2].Handle); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("ack with the handle before the change: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // the invisible time passes
	again, err := f.pop.Receive(ctx, "g", q, 10, time.Hour, false, nil)
	if err != nil || fmt.Sprint(bodies(again)) != "[m1@2 m3@1 m4@1 m5@1]" {
		t.Fatalf("second receive %v %v", bodies(again), err)
	}
	if err := f.pop.Ack(ctx, "g", again[1].Handle); err != nil { // m3
		t.Fatal(err)
	}
	// FIFO: nothing new while a message is in flight.
	if fifo, _ := f.pop.Receive(ctx, "fifo", q, 2, time.Hour, true, nil); fmt.Sprint(bodies(fifo)) != "[m0@1 m1@1]" {
		t.Fatalf("fifo first %v", bodies(fifo))
	}
	if fifo, _ := f.pop.Receive(ctx, "fifo", q, 2, time.Hour, true, nil); len(fifo) != 0 {
		t.Fatalf("fifo while in flight %v", bodies(fifo))
	}
	f.close(t)

	f = open(t, dir)
	defer f.close(t)
	if err := f.pop.Ack(ctx, "g", h2); err != nil {
		t.Fatalf("ack after restart with the changed handle: %v", err)
	}
	// m1, m4 and m5 are in flight for an hour: nothing now.
	if got, _ := f.pop.Receive(ctx, "g", q, 10, time.Hour, false, nil); len(got) != 0 {
		t.Fatalf("after restart %v", bodies(got))
	}
	if n := f.pop.InFlight("g"); n != 3 {
		t.Fatalf("in flight %d", n)
	}
	// m0, m2 and m3 acknowledged: base stops at m1, the lowest in flight.
	prog := f.pop.Progress("g", 2)
	if len(prog) != 1 || prog[0].Base != 1 || prog[0].Next != 6 || prog[0].InFlight != 3 || len(prog[0].Leases) != 2 ||
		prog[0].Leases[0].Offset != 1 || prog[0].Leases[0].Attempts != 2 || prog[0].Leases[1].Offset != 4 {
		t.Fatalf("progress %+v", prog)
	}
}

// TestPopReset: a reset moves a group back (or forward): messages from
// the offset are handed out again, those in flight included, and the
// reset holds after a restart.
func TestPopReset(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("reset")
	top, err := f.b.CreateTopic(ctx, name, 1, broker.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q := []model.QueueID{top.Queues[0]}
	var msgs []model.Message
	for i := range 5 {
		msgs = append(msgs, model.Message{Body: []byte(fmt.Sprint("m", i))})
	}
	if _, err := f.b.AppendMessages(ctx, name, 0, msgs); err != nil {
		t.Fatal(err)
	}
	got, err := f.pop.Receive(ctx, "g", q, 4, time.Hour, false, nil)
	if err != nil || len(got) != 4 {
		t.Fatalf("receive %v %v", bodies(got), err)
	}
	for _, d := range got[:2] {
		if err := f.pop.Ack(ctx, "g", d.Handle); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.pop.Reset(ctx, "g", q[0], 1); err != nil {
		t.Fatal(err)
	}
	if err := f.pop.Ack(ctx, "g", got[2].Handle); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("ack of a lease from before the reset: %v", err)
	}
	f.close(t)
	f = open(t, dir)
	defer f.close(t)
	again, err := f.pop.Receive(ctx, "g", q, 10, time.Hour, false, nil)
	if err != nil || fmt.Sprint(bodies(again)) != "[m1@1 m2@1 m3@1 m4@1]" {
		t.Fatalf("after the reset and a restart %v %v", bodies(again), err)
	}
	// Forgotten: the group starts again from its committed offset (none:
	// the queue's start), its leases gone.
	if err := f.pop.Forget(ctx, "g", q[0]); err != nil {
		t.Fatal(err)
	}
	fresh, err := f.pop.Receive(ctx, "g", q, 10, time.Hour, false, nil)
	if err != nil || fmt.Sprint(bodies(fresh)) != "[m0@1 m1@1 m2@1 m3@1 m4@1]" {
		t.Fatalf("after forgetting %v %v", bodies(fresh), err)
	}
}

func TestHandleRoundTrip(t *testing.T) {
	h := Handle{Queue: 7, Offset: 1 << 40, Gen: 9, Deadline: 123}
	got, err := ParseHandle(h.String())
	if err != nil || got != h {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"", "x", h.String() + "A", "AAAA"} {
		if _, err := ParseHandle(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseHandle(f *testing.F) {
	f.Add(Handle{Queue: 1, Offset: 2, Gen: 3, Deadline: 4}.String())
	f.Fuzz(func(t *testing.T, s string) { _, _ = ParseHandle(s) })
}

func FuzzDecodeRecord(f *testing.F) {
	r := receiveRecord{group: "g", queue: 1, next: 5, leases: []leaseRecord{{offset: 4, deadline: 9, attempts: 1, gen: 2}}, filtered: []model.QueueOffset{3}}
	f.Add(r.encode())
	f.Add((&ackRecord{group: "g", queue: 1, offset: 4, gen: 2}).encode())
	f.Add((&changeRecord{group: "g", queue: 1, offset: 4, oldGen: 2, gen: 3, deadline: 7}).encode())
	f.Add((&resetRecord{group: "g", queue: 1, offset: 4}).encode())
	f.Add((&forgetRecord{group: "g", queue: 1}).encode())
	f.Add((&acquireRecord{group: "g", queue: 1, base: 2, next: 9, holder: 7, deadline: 5, gen0: 3, archived: 1,
		runs: []Acquired{{First: 2, Last: 4, DeliveryCount: 1}}, done: []Span{{5, 5}}}).encode())
	f.Add((&settleRecord{group: "g", queue: 1, holder: 7, deadline: 5, runs: []settleRun{{first: 2, last: 3, typ: AckRelease}}}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeRecord(b)
		_, _ = decodeState(b)
	})
}
