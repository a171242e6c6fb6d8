package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// PublishAll answers each call as Publish would: refused calls fail alone,
// held messages go where they wait, the rest share one append and get
// their queues' next offsets in call order.
func TestPublishAllAnswersEachCall(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.close(t)
	ctx := context.Background()
	orders, _ := model.ParseTopicName("orders")
	small, _ := model.ParseTopicName("small")
	to, err := f.b.CreateTopic(ctx, orders, 2, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := f.b.CreateTopic(ctx, small, 1, TopicConfig{MaxMessageBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(body string, headers ...model.Header) []model.Message {
		return []model.Message{{Body: []byte(body), Headers: headers}}
	}
	big := make([]byte, 200)
	calls := []PublishCall{
		{Topic: to, Index: 0, Msgs: msg("a")},
		{Topic: ts, Index: 0, Msgs: []model.Message{{Body: big}}},                                      // over the topic's limit
		{Topic: to, Index: 1, Msgs: msg("b")},                                                          // another queue
		{Topic: to, Index: 0, Msgs: msg("c", model.Header{Key: HeaderDelayLevel, Value: []byte("2")})}, // held
		{Topic: to, Index: 0, Msgs: []model.Message{{Body: []byte("d")}, {Body: []byte("e")}}},         // a batch
		{Topic: ts, Index: 0, Msgs: msg("f")},
	}
	f.b.PublishAll(ctx, calls)
	want := []struct {
		kind PublishKind
		offs []model.QueueOffset
		err  error
	}{
		{PublishedNow, []model.QueueOffset{0}, nil},
		{0, nil, model.ErrMessageTooLarge},
		{PublishedNow, []model.QueueOffset{0}, nil},
		{PublishedDelayed, nil, nil},
		{PublishedNow, []model.QueueOffset{1, 2}, nil},
		{PublishedNow, []model.QueueOffset{0}, nil},
	}
	for i, w := range want {
		c := calls[i]
		if w.err != nil {
			if !errors.Is(c.Err, w.err) {
				t.Fatalf("call %d: err %v, want %v", i, c.Err, w.err)
			}
			continue
		}
		if c.Err != nil || c.Pub.Kind != w.kind {
			t.Fatalf("call %d: %+v %v", i, c.Pub, c.Err)
		}
		if w.offs != nil && (len(c.Pub.Offsets) != len(w.offs) || c.Pub.Offsets[0] != w.offs[0] || c.Pub.Offsets[len(w.offs)-1] != w.offs[len(w.offs)-1]) {
			t.Fatalf("call %d: offsets %v, want %v", i, c.Pub.Offsets, w.offs)
		}
		if w.kind == PublishedNow && c.Pub.Queue != c.Topic.Queues[c.Index] {
			t.Fatalf("call %d: queue %d", i, c.Pub.Queue)
		}
	}
	res, err := f.b.Read(orders, 0, 0, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	var bodies string
	for _, r := range res.Records {
		m, _ := DecodeMessage(r.Payload)
		bodies += string(m.Body)
	}
	if bodies != "ade" {
		t.Fatalf("queue 0 holds %q, want \"ade\"", bodies)
	}
}
