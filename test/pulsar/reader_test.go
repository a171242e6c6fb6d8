package pulsar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestReadersAndSeeks: readers start at the earliest message, the latest
// or a message id (exclusive and inclusive); HasNext sees the end; a
// subscription's Seek by id and by time moves it back.
func TestReadersAndSeeks(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic = "pulsar-readers"
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	var ids []pulsar.MessageID
	var times []time.Time
	for i := range 10 {
		times = append(times, time.Now())
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("r", i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		time.Sleep(5 * time.Millisecond)
	}
	read := func(r pulsar.Reader) []string {
		var out []string
		for r.HasNext() {
			m, err := r.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(m.Payload()))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		start     pulsar.MessageID
		inclusive bool
		want      string
	}{
		{"earliest", pulsar.EarliestMessageID(), false, "[r0 r1 r2 r3 r4 r5 r6 r7 r8 r9]"},
		{"latest", pulsar.LatestMessageID(), false, "[]"},
		{"after r4", ids[4], false, "[r5 r6 r7 r8 r9]"},
		{"from r4", ids[4], true, "[r4 r5 r6 r7 r8 r9]"},
	} {
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: tc.start, StartMessageIDInclusive: tc.inclusive})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(read(r)); got != tc.want {
			t.Errorf("reader %s: %s, want %s", tc.name, got, tc.want)
		}
		r.Close()
	}

	co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "seeker", StartMessageIDInclusive: true,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	for i := range 10 {
		m := receive(t, co, 10*time.Second)
		if string(m.Payload()) != fmt.Sprint("r", i) {
			t.Fatalf("message %d: %q", i, m.Payload())
		}
		_ = co.Ack(m)
	}
	// (The client keeps a seek's message id as a lower bound across a later
	// seek by time: time first.)
	if err := co.SeekByTime(times[3]); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, co, 10*time.Second); string(m.Payload()) != "r3" {
		t.Fatalf("after seeking to r3's time: %q", m.Payload())
	}
	if err := co.Seek(ids[7]); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, co, 10*time.Second); string(m.Payload()) != "r7" {
		t.Fatalf("after seeking to r7's id: %q", m.Payload())
	}
	last, err := co.GetLastMessageIDs()
	if err != nil || len(last) != 1 || last[0].EntryID() != ids[9].EntryID() {
		t.Fatalf("last message ids %v (%v), want entry %d", last, err, ids[9].EntryID())
	}
}

// TestFailoverAndPartitions: a partitioned topic (a Kafka topic of four
// partitions) is read by two Failover consumers, each active for some
// partitions; when one closes, the other takes its partitions and gets
// what it left unacknowledged. A producer routes by key over the
// partitions, and a regex consumer finds the topic.
func TestFailoverAndPartitions(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, total = "pulsar-parts", 400
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if _, err := kadm.NewClient(kc).CreateTopic(context.Background(), 4, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	c := client(t, n)
	parts, err := c.TopicPartitions(topic)
	if err != nil || len(parts) != 4 {
		t.Fatalf("partitions %v %v", parts, err)
	}
	sub := func(name string) pulsar.Consumer {
		co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fo", Name: name, Type: pulsar.Failover,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		return co
	}
	a, b := sub("a"), sub("b")
	defer b.Close()
	regex, err := c.Subscribe(pulsar.ConsumerOptions{TopicsPattern: "persistent://public/default/pulsar-pa.*",
		SubscriptionName: "rx", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer regex.Close()
	produce(t, c, topic, "p", total)

	got := map[string]string{} // payload → consumer
	byA := 0
	for len(got) < total/2 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := a.Receive(ctx)
		cancel()
		if err != nil {
			break
		}
		got[string(m.Payload())] = "a"
		byA++
		_ = a.Ack(m)
	}
	if byA == 0 || byA == total {
		t.Fatalf("consumer a got %d of %d: failover did not split the partitions", byA, total)
	}
	a.Close()
	for len(got) < total {
		m := receive(t, b, 10*time.Second)
		got[string(m.Payload())] = "b"
		_ = b.Ack(m)
	}
	seen := 0
	for seen < total {
		m := receive(t, regex, 20*time.Second)
		seen++
		_ = regex.Ack(m)
	}
}
