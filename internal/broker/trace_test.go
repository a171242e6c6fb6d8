package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestTraceSampleAndPlace: with a sample ratio, whole lives of about that
// share of messages are recorded (decided by id, so every event of a
// sampled message and none of the others); an event that knows only a
// message's place is found through the message's id; a restart keeps them.
func TestTraceSampleAndPlace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := openWith(t, dir, Options{AutoCreateTopics: true, TraceSample: 0.5})
	name, _ := model.ParseTopicName("sampled")
	tp, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{MessageTrace: TopicConfigMessageTrace})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("ID%030d", i)
		m := model.Message{Body: []byte("x"), Headers: []model.Header{{Key: HeaderUniqKey, Value: []byte(ids[i])}}}
		pub, err := f.b.Publish(WithTraceSource(ctx, "test", "c1"), tp, 0, []model.Message{m})
		if err != nil {
			t.Fatal(err)
		}
		// An acknowledgement by place only (as POP acks are recorded).
		f.b.TraceQueue(ctx, tp.Queues[0], pub.Offsets[0], nil, TraceEvent{Kind: TraceAcknowledged, Group: "g"})
	}
	wantEvents := func() int {
		traced := 0
		for _, id := range ids {
			if f.b.Traced(tp, id) {
				traced++
			}
		}
		return traced
	}
	traced := wantEvents()
	if traced < n/4 || traced > 3*n/4 {
		t.Fatalf("%d of %d messages sampled at 0.5", traced, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	// Every produced event of a sampled message, and every acknowledgement
	// (an event without the id cannot be sampled by it).
	for f.b.TraceStats().Recorded < int64(n+traced) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	check := func() {
		t.Helper()
		for i, id := range ids {
			evs, err := f.b.MessageTrace(id, "", 0, -1, 10)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !f.b.Traced(tp, id) && len(evs) != 0:
				t.Fatalf("%s not sampled, yet %d events", id, len(evs))
			case f.b.Traced(tp, id) && (len(evs) != 2 || evs[0].Kind != TraceProduced || evs[1].Kind != TraceAcknowledged ||
				evs[0].Offset != int64(i) || evs[0].Protocol != "test" || evs[0].Client != "c1" || evs[1].Group != "g"):
				t.Fatalf("%s: %+v", id, evs)
			}
		}
	}
	check()
	if s := f.b.TraceStats(); s.Dropped != 0 {
		t.Fatalf("dropped %d events", s.Dropped)
	}
	f.close(t)
	f = openWith(t, dir, Options{AutoCreateTopics: true, TraceSample: 0.5})
	defer f.close(t)
	tp, _ = f.b.Topic(name)
	check()
}

// TestTraceSampleRecordsByPlace: records without an id (Kafka records) are
// sampled by their place, so each one's events are all kept or all
// dropped, and about the ratio of them are kept.
func TestTraceSampleRecordsByPlace(t *testing.T) {
	ctx := context.Background()
	f := openWith(t, t.TempDir(), Options{AutoCreateTopics: true, TraceSample: 0.5})
	defer f.close(t)
	name, _ := model.ParseTopicName("records")
	tp, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{MessageTrace: TopicConfigMessageTrace})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	offs, err := f.b.AppendMessages(ctx, name, 0, make([]model.Message, n))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range offs {
		f.b.TraceRecord(tp, 0, off, TraceEvent{Kind: TraceProduced, Protocol: "kafka"})
		f.b.TraceRecord(tp, 0, off, TraceEvent{Kind: TraceDelivered, Protocol: "kafka"})
	}
	want := 0
	for _, off := range offs {
		if f.b.Traced(tp, tracePlace("records", 0, int64(off))) {
			want++
		}
	}
	kept := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		kept = 0
		whole := true
		for _, off := range offs {
			evs, err := f.b.MessageTrace("", "records", 0, int64(off), 10)
			if err != nil {
				t.Fatal(err)
			}
			switch len(evs) {
			case 2:
				kept++
			case 0:
			default:
				whole = false
			}
		}
		if whole && kept == want && int64(2*want) == f.b.TraceStats().Recorded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records not traced whole: %d kept, %+v", kept, f.b.TraceStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if kept < n/4 || kept > 3*n/4 {
		t.Fatalf("%d of %d records sampled at 0.5", kept, n)
	}
}
