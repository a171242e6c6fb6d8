//go:build !race

package cluster_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	rp "github.com/rosettamq/rosetta/internal/pulsar"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// TestClusterPulsar: three members holding three replication groups serve
// Pulsar clients beside Kafka and RocketMQ ones on one topic of six
// partitions (two in each group). A pulsar-client-go producer (batched,
// LZ4, one name, so the broker de-duplicates its resends) and a franz-go
// idempotent producer write to it while an Exclusive and a Shared
// subscription (two consumers) read it; the member leading group 0 — the
// one the first service URL names — is killed with SIGKILL mid-way and
// restarted. Every acknowledged message is stored exactly once (franz-go
// reads the topic), reaches both subscriptions with its key and
// properties, and the Pulsar-produced ones reach a rocketmq-client-go push
// consumer with their keys and properties.
func TestClusterPulsar(t *testing.T) {
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=0", envPulsar+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
	const topic = "pulsar-cross"
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	// Made over Pulsar's admin API at a member not leading group 0.
	const path = "/admin/v2/persistent/public/default/" + topic
	if code := c.adminCallAt(ctx, t, c.member(2), "PUT", path+"/partitions", 6, nil); code != http.StatusNoContent {
		t.Fatalf("create the partitioned topic: %d", code)
	}
	var lookup map[string]string
	c.adminCallAt(ctx, t, c.member(3), "GET", "/lookup/v2/topic/persistent/public/default/"+topic+"-partition-1", nil, &lookup)
	if want := "pulsar://" + net.JoinHostPort(c.member(2).host, strconv.Itoa(c.ports[6]+1)); lookup["brokerUrl"] != want {
		t.Fatalf("HTTP lookup of partition 1 (group 1, led by member 2): %v, want %s", lookup, want)
	}

	pc := c.pulsarClient(t)
	excl := startPulsarReader(t, pc, topic, "cross-exclusive", pulsar.Exclusive, 1)
	shared := startPulsarReader(t, pc, topic, "cross-shared", pulsar.Shared, 2)
	pl := startPulsarLoad(t, pc, topic)
	kl := startKafkaKeyedLoad(t, kcl)
	waitBoth := func(what string, n int) {
		t.Helper()
		pn, kn := pl.ackCount()+n, kl.ackCount()+n
		start := time.Now()
		apptest.Eventually(t, 90*time.Second, what, func() bool { return pl.ackCount() >= pn && kl.ackCount() >= kn })
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	}
	waitBoth("sends acknowledged", 3000)

	victim := c.member(1) // leads group 0: the first member's Pulsar port answers lookups through it
	c.kill(victim)
	t.Logf("member %d killed", victim.id)
	waitBoth("sends acknowledged after the kill", 300)
	c.start(victim)
	c.wait(victim)
	apptest.Eventually(t, 90*time.Second, "group 0 back at member 1", func() bool { return c.spread(ctx) })
	waitBoth("sends acknowledged after the restart", 300)
	pl.stop()
	kl.stop()
	t.Logf("Pulsar: %d acknowledged (%d failed); Kafka: %d acknowledged (%d failed)", pl.ackCount(), pl.failed.Load(), kl.ackCount(), kl.failed.Load())

	// Stored once: franz-go reads the whole topic.
	stored := readTopic(ctx, t, c, topic, pl.ackCount()+kl.ackCount())
	for v, r := range stored {
		if r.count > 1 { // also of a send that failed
			t.Fatalf("%s stored %d times", v, r.count)
		}
	}
	for _, l := range []*keyedLoad{pl, kl} {
		for v, want := range l.acked() {
			got := stored[v]
			switch {
			case got.count != 1:
				t.Fatalf("%s stored %d times", v, got.count)
			case got.key != want.key || got.props["src"] != want.props["src"] || got.props["i"] != want.props["i"]:
				t.Fatalf("%s stored with key %q headers %v, want %q %v", v, got.key, got.props, want.key, want.props)
			}
		}
	}
	// Both subscriptions got everything acknowledged, keys and properties
	// intact (a redelivery after the kill is allowed: acks may be lost).
	all := merge(pl.acked(), kl.acked())
	excl.waitAll(t, all, 90*time.Second)
	shared.waitAll(t, all, 90*time.Second)
	t.Logf("exclusive subscription: %d messages (%d redelivered); shared: %d (%d redelivered, by consumer %v)",
		excl.count(), excl.again.Load(), shared.count(), shared.again.Load(), shared.byConsumer())

	// The admin API answers for the partitions of every group.
	var stats struct {
		MsgInCounter  int64                     `json:"msgInCounter"`
		Metadata      struct{ Partitions int }  `json:"metadata"`
		Partitions    map[string]map[string]any `json:"partitions"`
		Subscriptions map[string]struct {
			MsgBacklog int64            `json:"msgBacklog"`
			Type       string           `json:"type"`
			Consumers  []map[string]any `json:"consumers"`
		} `json:"subscriptions"`
	}
	apptest.Eventually(t, 30*time.Second, "partitioned stats with no backlog", func() bool {
		c.adminCallAt(ctx, t, c.member(3), "GET", path+"/partitioned-stats", nil, &stats)
		return stats.Subscriptions["cross-shared"].MsgBacklog == 0 && stats.Subscriptions["cross-exclusive"].MsgBacklog == 0
	})
	if sh, ex := stats.Subscriptions["cross-shared"], stats.Subscriptions["cross-exclusive"]; stats.MsgInCounter != int64(len(stored)) ||
		stats.Metadata.Partitions != 6 || len(stats.Partitions) != 6 || sh.Type != "Shared" || len(sh.Consumers) != 12 ||
		ex.Type != "Exclusive" || len(ex.Consumers) != 6 {
		t.Fatalf("partitioned stats: %d messages in (%d stored), %d partitions (%d listed), subscriptions %+v",
			stats.MsgInCounter, len(stored), stats.Metadata.Partitions, len(stats.Partitions), stats.Subscriptions)
	}
	var subs []string
	c.adminCallAt(ctx, t, c.member(1), "GET", path+"/subscriptions", nil, &subs)
	if fmt.Sprint(subs) != "[cross-exclusive cross-shared]" {
		t.Fatalf("subscriptions %v", subs)
	}
	// Back to the start on every partition: everything comes again.
	before := excl.again.Load()
	if code := c.adminCallAt(ctx, t, c.member(2), "POST", path+"/subscription/cross-exclusive/resetcursor/0", nil, nil); code != http.StatusNoContent {
		t.Fatalf("reset cursor: %d", code)
	}
	apptest.Eventually(t, 60*time.Second, "every message again after the reset", func() bool {
		return excl.again.Load()-before >= int64(len(all))
	})

	// A RocketMQ push consumer reads what the Pulsar producer sent.
	var mu sync.Mutex
	got := map[string]*primitive.MessageExt{}
	rc, err := rocketmq.NewPushConsumer(consumer.WithGroupName("cross-rocketmq"), consumer.WithInstance("cross-rocketmq"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver(c.addrs(3))), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = rc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				got[string(m.Body)] = m
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Shutdown() }()
	want := pl.acked()
	apptest.Eventually(t, 90*time.Second, "the RocketMQ consumer to get every Pulsar message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range want {
			if got[v] == nil {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for v, w := range want {
		m := got[v]
		if m.GetKeys() != w.key || m.GetProperty("src") != "pulsar" || m.GetProperty("i") != w.props["i"] {
			t.Fatalf("%s: RocketMQ keys %q properties %v, want %q %v", v, m.GetKeys(), m.GetProperties(), w.key, w.props)
		}
	}
}

// pulsarClient is a pulsar-client-go client of the cluster: a service URL
// naming every member's Pulsar port (the protocol-only nodes' with
// viaProtocol).
func (c *cluster) pulsarClient(t *testing.T) pulsar.Client {
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + strings.Join(c.clientAddrs(6), ","), OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: plog.NewLoggerWithSlog(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// pulsarLookup asks the Pulsar port at addr where a topic's clients
// connect (the lookup's pulsar:// URL).
func pulsarLookup(t *testing.T, addr, topic string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	write := func(cmd *pulsarpb.BaseCommand) {
		b, err := rp.AppendCommand(nil, cmd)
		if err == nil {
			_, err = c.Write(b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	read := func() *pulsarpb.BaseCommand {
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		f, err := rp.DecodeFrame(b)
		if err != nil {
			t.Fatal(err)
		}
		return f.Command
	}
	write(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: &pulsarpb.CommandConnect{
		ClientVersion: proto.String("lookup"), ProtocolVersion: proto.Int32(20)}})
	if cmd := read(); cmd.GetType() != pulsarpb.BaseCommand_CONNECTED {
		t.Fatalf("connect: %v", cmd)
	}
	write(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pulsarpb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(1)}})
	cmd := read()
	if cmd.GetType() != pulsarpb.BaseCommand_LOOKUP_RESPONSE || cmd.GetLookupTopicResponse().GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect {
		t.Fatalf("lookup %s: %v", topic, cmd)
	}
	return cmd.GetLookupTopicResponse().GetBrokerServiceUrl()
}

// sent is what a message was sent with.
type sent struct {
	key   string
	props map[string]string
}

// keyedLoad sends keyed messages with properties until stopped,
// remembering which were acknowledged.
type keyedLoad struct {
	mu     sync.Mutex
	acks   map[string]sent
	failed atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func newKeyedLoad() (*keyedLoad, context.Context) {
	ctx, cancel := context.WithCancel(context.Background())
	return &keyedLoad{acks: map[string]sent{}, cancel: cancel, done: make(chan struct{})}, ctx
}

func (l *keyedLoad) ack(v string, s sent) {
	l.mu.Lock()
	l.acks[v] = s
	l.mu.Unlock()
}

func (l *keyedLoad) ackCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// acked is a copy of what was acknowledged, by value.
func (l *keyedLoad) acked() map[string]sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]sent, len(l.acks))
	for k, v := range l.acks {
		out[k] = v
	}
	return out
}

func (l *keyedLoad) stop() {
	l.cancel()
	<-l.done
}

func merge(ms ...map[string]sent) map[string]sent {
	out := map[string]sent{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// startPulsarLoad sends with one named, batching, LZ4 producer, a window of
// messages in flight, up to 2,000 a second; sends that fail (the send timeout, while a group
// fails over) are counted, not retried.
func startPulsarLoad(t *testing.T, cl pulsar.Client, topic string) *keyedLoad {
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "cross-producer", CompressionType: pulsar.LZ4,
		BatchingMaxPublishDelay: 5 * time.Millisecond, SendTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, ctx := newKeyedLoad()
	window := make(chan struct{}, 64)
	go func() {
		defer close(l.done)
		defer p.Close()
		var wg sync.WaitGroup
		defer wg.Wait()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			time.Sleep(500 * time.Microsecond) // at most 2,000 a second: the machine is shared with the other loads
			v := fmt.Sprint("p-", i)
			s := sent{key: fmt.Sprint("pk-", i%97), props: map[string]string{"src": "pulsar", "i": strconv.Itoa(i)}}
			wg.Add(1)
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Key: s.key, Payload: []byte(v), Properties: s.props},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer wg.Done()
					defer func() { <-window }()
					if err != nil {
						l.failed.Add(1)
						return
					}
					l.ack(v, s)
				})
		}
	}()
	return l
}

// startKafkaKeyedLoad produces keyed records with headers (franz-go's
// idempotent producer, acks=all) over the topic's partitions in turn.
func startKafkaKeyedLoad(t *testing.T, cl *kgo.Client) *keyedLoad {
	l, ctx := newKeyedLoad()
	go func() {
		defer close(l.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		window := make(chan struct{}, 64)
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			v := fmt.Sprint("k-", i)
			s := sent{key: fmt.Sprint("kk-", i%89), props: map[string]string{"src": "kafka", "i": strconv.Itoa(i)}}
			r := &kgo.Record{Key: []byte(s.key), Value: []byte(v),
				Headers: []kgo.RecordHeader{{Key: "src", Value: []byte("kafka")}, {Key: "i", Value: []byte(s.props["i"])}}}
			wg.Add(1)
			cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				defer wg.Done()
				defer func() { <-window }()
				if err != nil {
					l.failed.Add(1)
					return
				}
				l.ack(v, s)
			})
		}
	}()
	return l
}

// storedRecord is what franz-go reads of one value.
type storedRecord struct {
	count int
	key   string
	props map[string]string
}

// readTopic reads a topic from its start until at least n records came
// (and a quiet second after), by value.
func readTopic(ctx context.Context, t *testing.T, c *cluster, topic string, n int) map[string]storedRecord {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]storedRecord{}
	total := 0
	deadline := time.Now().Add(90 * time.Second)
	for {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(fctx)
		cancel()
		got := 0
		fs.EachRecord(func(r *kgo.Record) {
			got++
			s := out[string(r.Value)]
			s.count++
			s.key, s.props = string(r.Key), map[string]string{}
			for _, h := range r.Headers {
				s.props[h.Key] = string(h.Value)
			}
			out[string(r.Value)] = s
		})
		total += got
		if total >= n && got == 0 {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %d records of %s, want at least %d", total, topic, n)
		}
	}
}

// pulsarReader consumes a subscription with n consumers, acknowledging
// each message.
type pulsarReader struct {
	mu     sync.Mutex
	got    map[string]sent
	by     map[string]int
	again  atomic.Int64 // messages received more than once
	cancel context.CancelFunc
}

func startPulsarReader(t *testing.T, cl pulsar.Client, topic, sub string, typ pulsar.SubscriptionType, n int) *pulsarReader {
	ctx, cancel := context.WithCancel(context.Background())
	r := &pulsarReader{got: map[string]sent{}, by: map[string]int{}, cancel: cancel}
	var wg sync.WaitGroup
	for i := range n {
		name := fmt.Sprint(sub, "-", i)
		co, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ, Name: name,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := co.Receive(ctx)
				if err != nil {
					return
				}
				v := string(m.Payload())
				r.mu.Lock()
				if _, ok := r.got[v]; ok {
					r.again.Add(1)
				}
				r.got[v] = sent{key: m.Key(), props: m.Properties()}
				r.by[name]++
				r.mu.Unlock()
				_ = co.Ack(m)
			}
		}()
		t.Cleanup(co.Close)
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

func (r *pulsarReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *pulsarReader) byConsumer() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.by {
		out[k] = v
	}
	return out
}

// waitAll waits until every message of want came, then checks keys and
// properties.
func (r *pulsarReader) waitAll(t *testing.T, want map[string]sent, d time.Duration) {
	t.Helper()
	missing := 0
	deadline := time.Now().Add(d)
	for {
		r.mu.Lock()
		missing = 0
		for v := range want {
			if _, ok := r.got[v]; !ok {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged messages never reached the subscription", missing, len(want))
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for v, w := range want {
		g := r.got[v]
		if g.key != w.key || g.props["src"] != w.props["src"] || g.props["i"] != w.props["i"] {
			t.Fatalf("%s received with key %q properties %v, want %q %v", v, g.key, g.props, w.key, w.props)
		}
	}
}
