package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// arrivals reads a topic's queue 0 until n messages are there and returns
// each body's store time.
func arrivals(t *testing.T, b *Broker, name model.TopicName, n int, within time.Duration) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	deadline := time.Now().Add(within)
	for len(got) < n {
		if time.Now().After(deadline) {
			start, hw, end, _ := b.Offsets(name, 0)
			t.Fatalf("%d of %d timer messages arrived: %v (queue start %d hw %d end %d)", len(got), n, got, start, hw, end)
		}
		res, err := b.Read(name, 0, 0, ReadOptions{MaxRecords: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Records {
			m, err := DecodeMessage(r.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.Header(headerTimerPrev); ok {
				t.Fatalf("internal header delivered: %+v", m.Headers)
			}
			got[string(m.Body)] = r.StoreTime
		}
		res.Release()
		time.Sleep(5 * time.Millisecond)
	}
	return got
}

// TestTimerDelivery: timer messages sent out of order arrive in due order,
// exactly when due (on the fake clock of a synctest bubble); one due in the
// past arrives at once; one beyond the longest delay is refused.
func TestTimerDelivery(t *testing.T) { synctest.Test(t, testTimerDelivery) }

func testTimerDelivery(t *testing.T) {
	ctx := context.Background()
	f := open(t, t.TempDir())
	defer f.close(t)
	name, _ := model.ParseTopicName("timed")
	if _, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dues := map[string]int64{}
	for i, d := range []time.Duration{15 * time.Second, 300 * time.Millisecond, 22 * time.Second, 15010 * time.Millisecond, -time.Second} {
		body := fmt.Sprint("t", i)
		due := start.Add(d).UnixMilli()
		dues[body] = max(due, time.Now().UnixMilli())
		if _, _, err := f.b.AppendTimer(ctx, name, 0, model.Message{Body: []byte(body)}, due); err != nil {
			t.Fatal(err)
		}
	}
	got := arrivals(t, f.b, name, len(dues), time.Minute)
	for body, at := range got {
		if late := at - dues[body]; late != 0 {
			t.Errorf("%s arrived %d ms after its due time", body, late)
		}
	}
	if _, _, err := f.b.AppendTimer(ctx, name, 0, model.Message{Body: []byte("far")}, start.Add(41*24*time.Hour).UnixMilli()); !errors.Is(err, ErrTimerIllegal) {
		t.Fatalf("beyond the longest delay: %v", err)
	}
}

// TestTimerSurvivesRestart: timer messages pending when the broker stops
// are delivered after it restarts — those overdue at once, the others when
// due — and delivered ones are not delivered again, also when the node
// recovers from the log alone (the delivery cursor is a log record).
func TestTimerSurvivesRestart(t *testing.T) {
	for _, logAlone := range []bool{false, true} {
		t.Run(fmt.Sprintf("log_alone=%v", logAlone), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { testTimerRestart(t, logAlone) })
		})
	}
}

func testTimerRestart(t *testing.T, logAlone bool) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("timed")
	if _, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	send := func(body string, d time.Duration) int64 {
		due := now.Add(d).UnixMilli()
		if _, _, err := f.b.AppendTimer(ctx, name, 0, model.Message{Body: []byte(body)}, due); err != nil {
			t.Fatal(err)
		}
		return due
	}
	send("early", 100*time.Millisecond)
	later := send("later", 2500*time.Millisecond) // sent before one due sooner: the index's times are not per record
	send("overdue", 800*time.Millisecond)
	arrivals(t, f.b, name, 1, 2*time.Second)
	f.close(t)
	if logAlone {
		if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(now.Add(time.Second))) // "overdue" falls due while stopped
	f = open(t, dir)
	defer f.close(t)
	got := arrivals(t, f.b, name, 3, 5*time.Second)
	if late := got["later"] - later; late != 0 {
		t.Errorf("later arrived %d ms after its due time", late)
	}
	time.Sleep(time.Minute) // nothing more comes
	synctest.Wait()
	res, err := f.b.Read(name, 0, 0, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if len(res.Records) != 3 {
		var bodies []string
		for _, r := range res.Records {
			m, _ := DecodeMessage(r.Payload)
			bodies = append(bodies, string(m.Body))
		}
		t.Fatalf("%d messages delivered, want 3 (each once): %v", len(res.Records), bodies)
	}
}

func TestTimerDeliverAt(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	msg := func(kv ...string) *model.Message {
		m := &model.Message{}
		for i := 0; i < len(kv); i += 2 {
			m.Headers = append(m.Headers, model.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return m
	}
	for _, c := range []struct {
		m     *model.Message
		at    int64
		timer bool
		bad   bool
	}{
		{msg(), 0, false, false},
		{msg(HeaderTimerDeliverMs, "2000000"), 2_000_000, true, false},
		{msg(HeaderTimerDelayMs, "1500", HeaderTimerDeliverMs, "5"), 1_001_500, true, false},
		{msg(HeaderTimerDelaySec, "3", HeaderTimerDelayMs, "1500"), 1_003_000, true, false},
		{msg(HeaderTimerDelaySec, "3", HeaderDelayLevel, "2"), 0, false, false},
		{msg(HeaderTimerDelaySec, "x"), 0, true, true},
	} {
		at, timer, err := TimerDeliverAt(c.m, now)
		if timer != c.timer || (err != nil) != c.bad || (!c.bad && at != c.at) {
			t.Errorf("%+v: %d %v %v", c.m.Headers, at, timer, err)
		}
	}
}

// TestTimerRecall: a recalled timer message is never delivered — recalled
// long before its second, or once its second is taken — also across a
// restart; recalling it again, or a delivered one, fails.
func TestTimerRecall(t *testing.T) { synctest.Test(t, testTimerRecall) }

func testTimerRecall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("recalled")
	if _, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	send := func(id string, d time.Duration) int64 {
		due := now.Add(d).UnixMilli()
		m := model.Message{Body: []byte(id), Headers: []model.Header{{Key: "UNIQ_KEY", Value: []byte(id)}}, IndexKeys: []string{id}}
		if _, _, err := f.b.AppendTimer(ctx, name, 0, m, due); err != nil {
			t.Fatal(err)
		}
		return due
	}
	dueA := send("a", 2*time.Second)
	send("b", 2*time.Second)
	dueC := send("c", 300*time.Millisecond)
	if err := f.b.RecallTimer(ctx, name, "a", dueA); err != nil {
		t.Fatal(err)
	}
	if err := f.b.RecallTimer(ctx, name, "a", dueA); !errors.Is(err, ErrTimerNotPending) {
		t.Fatalf("second recall: %v", err)
	}
	time.Sleep(time.Until(time.UnixMilli(dueC).Add(-100 * time.Millisecond))) // c's second is taken
	if err := f.b.RecallTimer(ctx, name, "c", dueC); err != nil {
		t.Fatal(err)
	}
	f.close(t)
	f = open(t, dir)
	defer f.close(t)
	got := arrivals(t, f.b, name, 1, 5*time.Second)
	time.Sleep(time.Minute) // nothing more comes
	synctest.Wait()
	if _, ok := got["b"]; !ok || len(got) != 1 {
		t.Fatalf("delivered %v, want only b", got)
	}
	res, err := f.b.Read(name, 0, 0, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if len(res.Records) != 1 {
		t.Fatalf("%d messages delivered, want 1", len(res.Records))
	}
	if err := f.b.RecallTimer(ctx, name, "b", dueA); !errors.Is(err, ErrTimerNotPending) {
		t.Fatalf("recall after delivery: %v", err)
	}
}

// TestPendingTimers: the listing shows what waits, the earliest first —
// entries of seconds the delivery loop holds and of later ones — per topic,
// without recalled or delivered ones, and stops at its limit.
func TestPendingTimers(t *testing.T) { synctest.Test(t, testPendingTimers) }

func testPendingTimers(t *testing.T) {
	ctx := context.Background()
	f := open(t, t.TempDir())
	defer f.close(t)
	a, _ := model.ParseTopicName("timers-a")
	other, _ := model.ParseTopicName("timers-b")
	for _, n := range []model.TopicName{a, other} {
		if _, err := f.b.CreateTopic(ctx, n, 1, TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	send := func(topic model.TopicName, id string, d time.Duration) {
		m := model.Message{Body: []byte(id), Tags: "tag-" + id, Headers: []model.Header{{Key: "UNIQ_KEY", Value: []byte(id)}}, IndexKeys: []string{id}}
		if _, _, err := f.b.AppendTimer(ctx, topic, 0, m, now.Add(d).UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	send(a, "late", time.Hour)
	send(a, "soon", 500*time.Millisecond) // its second is taken into the heap at once
	send(other, "elsewhere", time.Minute)
	send(a, "mid", time.Minute)
	send(a, "recalled", time.Minute)
	if err := f.b.RecallTimer(ctx, a, "recalled", 0); err != nil {
		t.Fatal(err)
	}
	ids := func(topic string, max int) ([]string, bool) {
		t.Helper()
		list, more, err := f.b.PendingTimers(ctx, topic, TimerListLimits{Max: max})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range list {
			out = append(out, p.ID)
		}
		return out, more
	}
	if got, more := ids(a.String(), 10); !slices.Equal(got, []string{"soon", "mid", "late"}) || more {
		t.Fatalf("pending on %s: %v (more %v)", a, got, more)
	}
	if got, more := ids("", 2); !slices.Equal(got, []string{"soon", "elsewhere"}) && !slices.Equal(got, []string{"soon", "mid"}) || !more {
		t.Fatalf("first two of all: %v (more %v)", got, more)
	}
	list, _, _ := f.b.PendingTimers(ctx, a.String(), TimerListLimits{})
	if p := list[0]; p.Topic != a.String() || p.Tags != "tag-soon" || p.Size != 4 || p.Due.UnixMilli() != now.Add(500*time.Millisecond).UnixMilli() {
		t.Fatalf("entry: %+v", p)
	}
	arrivals(t, f.b, a, 1, 5*time.Second) // "soon" is delivered
	if got, _ := ids(a.String(), 10); !slices.Equal(got, []string{"mid", "late"}) {
		t.Fatalf("after a delivery: %v", got)
	}
}
