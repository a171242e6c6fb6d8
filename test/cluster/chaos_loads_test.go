//go:build !race

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// runner is a loop in a goroutine of its own until stopped.
type runner struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRunner() *runner {
	ctx, cancel := context.WithCancel(context.Background())
	return &runner{ctx: ctx, cancel: cancel}
}

func (r *runner) goLoop(fn func(ctx context.Context)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn(r.ctx)
	}()
}

func (r *runner) stop() {
	r.cancel()
	r.wg.Wait()
}

// txnLoad runs transactions of ten records each with one transactional
// producer, remembering which committed, which aborted and which ended
// with an unknown outcome (the client is then replaced, which fences and
// settles the transaction).
type txnLoad struct {
	*runner
	topic                       string
	mu                          sync.Mutex
	committed, aborted, unknown [][]string
}

func startTxnLoad(t *testing.T, c *cluster, topic string) *txnLoad {
	l := &txnLoad{runner: newRunner(), topic: topic}
	newClient := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("chaos-txn"),
			kgo.TransactionTimeout(15*time.Second), kgo.RecordDeliveryTimeout(20*time.Second), kgo.MetadataMinAge(250*time.Millisecond),
			kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }), clientLog("txn"))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	l.goLoop(func(ctx context.Context) {
		cl := newClient()
		defer func() { cl.Close() }()
		for n := 0; ctx.Err() == nil; n++ {
			time.Sleep(20 * time.Millisecond)
			var vals []string
			if err := cl.BeginTransaction(); err != nil {
				cl.Close()
				cl = newClient()
				continue
			}
			var mu sync.Mutex
			var failed error
			for i := 0; i < 10; i++ {
				v := fmt.Sprintf("t%06d-%d", n, i)
				vals = append(vals, v)
				cl.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
					}
				})
			}
			fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = cl.Flush(fctx)
			fcancel()
			mu.Lock()
			end := kgo.TryCommit
			if failed != nil {
				end = kgo.TryAbort
			}
			mu.Unlock()
			ectx, ecancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := cl.EndTransaction(ectx, end)
			ecancel()
			l.mu.Lock()
			switch {
			case err == nil && end == kgo.TryCommit:
				l.committed = append(l.committed, vals)
			case err == nil:
				l.aborted = append(l.aborted, vals)
			default:
				l.unknown = append(l.unknown, vals)
			}
			l.mu.Unlock()
			if err != nil {
				cl.Close()
				cl = newClient()
			}
		}
	})
	return l
}

// verify reads the topic with read_committed: every committed transaction
// exactly once, no aborted one, each unknown one whole or not at all.
func (l *txnLoad) verify(t *testing.T, c *cluster) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics(l.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// The last stable offsets reach the ends once every transaction has
	// ended (an unsettled one times out after 15 s).
	var ends kadm.ListedOffsets
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stable, err1 := adm.ListCommittedOffsets(ctx, l.topic)
		high, err2 := adm.ListEndOffsets(ctx, l.topic)
		cancel()
		if err1 == nil && err2 == nil && stable.Error() == nil && high.Error() == nil && equalOffsets(stable, high) {
			ends = high
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ends == nil {
		t.Fatal("transactions of chaos-txn never all ended")
	}
	seen := values{}
	next := map[int32]int64{}
	done := func() bool {
		all := true
		ends.Each(func(o kadm.ListedOffset) { all = all && next[o.Partition] >= o.Offset-1 })
		return all
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !done() && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; next[r.Partition] = r.Offset + 1 })
		if pctx.Err() != nil && len(fs.Records()) == 0 {
			break // nothing more: the rest of the log is aborted records and markers
		}
	}
	for v, n := range seen {
		if n > 1 {
			t.Errorf("transactional record %s read %d times", v, n)
		}
	}
	for _, txn := range l.committed {
		if m := seen.missing(txn); len(m) > 0 {
			t.Errorf("committed transaction lost records: %s", firstFew(m))
		}
	}
	for _, txn := range l.aborted {
		if m := seen.missing(txn); len(m) < len(txn) {
			t.Errorf("aborted transaction visible: %v", txn)
		}
	}
	whole := 0
	for _, txn := range l.unknown {
		switch m := seen.missing(txn); len(m) {
		case 0:
			whole++
		case len(txn):
		default:
			t.Errorf("transaction with an unknown outcome partly visible: missing %s", firstFew(m))
		}
	}
	t.Logf("kafka transactions: %d committed, %d aborted, %d unknown (%d of them committed); %d records read once",
		len(l.committed), len(l.aborted), len(l.unknown), whole, len(seen))
}

func equalOffsets(a, b kadm.ListedOffsets) bool {
	eq := true
	b.Each(func(o kadm.ListedOffset) {
		x, ok := a.Lookup(o.Topic, o.Partition)
		eq = eq && ok && x.Offset == o.Offset
	})
	return eq
}

// rocketLoad sends with one RocketMQ client (remoting or gRPC) and
// consumes with another, remembering what each acknowledged.
type rocketLoad struct {
	*runner
	name      string
	mu        sync.Mutex
	acked     []string
	failed    int
	received  values
	stopRecv  func()
	lastError error
	brokers   map[string]int // acknowledged sends by the broker (remoting) or endpoint (gRPC) that took them
	// For a failure's report: when each send was acknowledged and by
	// which broker or endpoint, and where the topic can be read back.
	ackAt map[string]ackNote
	c     *cluster
	topic string
	group string // the consumer group receiving
	// failures: runs of failed sends (a gap of over 2 s starts a new one).
	failures []failRun
}

// failRun is a run of failed sends.
type failRun struct {
	from, to time.Time
	n        int
	first    error
}

// ackNote is when and by whom a send was acknowledged.
type ackNote struct {
	at time.Time
	by string
}

// ackedBy counts an acknowledged send by the broker that took it.
func (l *rocketLoad) ackedBy(body, broker string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.brokers == nil {
		l.brokers, l.ackAt = map[string]int{}, map[string]ackNote{}
	}
	l.brokers[broker]++
	l.ackAt[body] = ackNote{at: time.Now(), by: broker}
}

// ackCount is how many sends were acknowledged so far.
func (l *rocketLoad) ackCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *rocketLoad) sent(body string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed++
		l.lastError = err
		now := time.Now()
		if n := len(l.failures); n > 0 && now.Sub(l.failures[n-1].to) < 2*time.Second {
			l.failures[n-1].to = now
			l.failures[n-1].n++
		} else {
			l.failures = append(l.failures, failRun{from: now, to: now, n: 1, first: err})
		}
		return
	}
	l.acked = append(l.acked, body)
}

func (l *rocketLoad) got(body string) {
	l.mu.Lock()
	l.received[body]++
	l.mu.Unlock()
}

// verify waits until every acknowledged message was received (at least
// once: RocketMQ delivers at least once).
func (l *rocketLoad) verify(t *testing.T) {
	t.Helper()
	var missing []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		l.mu.Lock()
		missing = l.received.missing(l.acked)
		l.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.stopRecv()
	l.mu.Lock()
	defer l.mu.Unlock()
	dups := 0
	for _, n := range l.received {
		if n > 1 {
			dups++
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s: %d of %d acknowledged messages never received: %s", l.name, len(missing), len(l.acked), firstFew(missing))
		l.explainMissing(t, missing)
	}
	t.Logf("%s: %d messages acknowledged, %d sends failed (last: %v), %d received, %d of them more than once",
		l.name, len(l.acked), l.failed, l.lastError, len(l.received), dups)
	for _, f := range l.failures {
		t.Logf("%s: %d sends failed from %s to %s, the first with: %v", l.name, f.n,
			f.from.Format("15:04:05.000"), f.to.Format("15:04:05.000"), f.first)
	}
}

// explainMissing reports when and where the missing messages were
// acknowledged, and whether the topic holds them (read with a Kafka
// client from the start): stored but never delivered, or not stored.
func (l *rocketLoad) explainMissing(t *testing.T, missing []string) {
	t.Helper()
	by := map[string]int{}
	var first, last time.Time
	for _, m := range missing {
		n := l.ackAt[m]
		by[n.by]++
		if first.IsZero() || n.at.Before(first) {
			first = n.at
		}
		if n.at.After(last) {
			last = n.at
		}
	}
	t.Logf("%s: the missing messages were acknowledged from %s to %s, by %v", l.name,
		first.Format("15:04:05.000"), last.Format("15:04:05.000"), by)
	if l.c == nil {
		return
	}
	want := map[string]bool{}
	for _, m := range missing {
		want[m] = true
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.c.seeds()...), kgo.ConsumeTopics(l.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Logf("%s: cannot read the topic back: %v", l.name, err)
		return
	}
	defer cl.Close()
	found := map[int32]int{}
	var where []*kgo.Record
	stored, empty := 0, 0
	for deadline := time.Now().Add(30 * time.Second); empty < 4 && time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() == 0 {
			empty++
			continue
		}
		empty = 0
		fs.EachRecord(func(r *kgo.Record) {
			if want[string(r.Value)] {
				delete(want, string(r.Value))
				stored++
				found[r.Partition]++
				where = append(where, r)
			}
		})
	}
	t.Logf("%s: %d of the %d missing messages are stored (by partition %v): stored but never delivered, the rest not stored",
		l.name, stored, len(missing), found)
	for _, r := range where[:min(len(where), 3)] {
		l.logTrace(t, r)
	}
	l.logProgress(t, where)
}

// logProgress logs the consumer group's committed offsets (a POP group's
// are where everything below was acknowledged) for the queues of records
// never delivered.
func (l *rocketLoad) logProgress(t *testing.T, where []*kgo.Record) {
	t.Helper()
	if len(where) == 0 {
		return
	}
	var d apiv1.GroupDetail
	for _, m := range l.c.members {
		if m.cmd == nil {
			continue
		}
		if code, err := l.c.adminTry(context.Background(), t, m, http.MethodGet, "/api/v1/groups/"+l.group, nil, &d); err == nil && code < 300 {
			break
		}
	}
	for _, r := range where[:min(len(where), 3)] {
		for _, o := range d.Offsets {
			if o.Topic == l.topic && o.Queue == r.Partition {
				t.Logf("%s: group %s committed %d of partition %d (end %d); the missing record is at %d", l.name, l.group, o.Committed, o.Queue, o.End, r.Offset)
			}
		}
		for _, p := range d.Pop {
			if p.Topic == l.topic && p.Queue == r.Partition {
				t.Logf("%s: group %s POP progress in partition %d: base %d, next %d, %d in flight, lowest %+v; the missing record is at %d",
					l.name, l.group, p.Queue, p.Base, p.Next, p.InFlight, p.Leases, r.Offset)
			}
		}
	}
}

// logTrace logs what the broker recorded of a stored message's life (on
// topics with message_trace on).
func (l *rocketLoad) logTrace(t *testing.T, r *kgo.Record) {
	t.Helper()
	var tr apiv1.MessageTrace
	path := fmt.Sprintf("/api/v1/trace?topic=%s&queue=%d&offset=%d", l.topic, r.Partition, r.Offset)
	for _, m := range l.c.members {
		if m.cmd == nil {
			continue
		}
		if code, err := l.c.adminTry(context.Background(), t, m, http.MethodGet, path, nil, &tr); err != nil || code >= 300 {
			continue
		}
		t.Logf("%s: %s at partition %d offset %d, as member %d's admin API traces it:", l.name, r.Value, r.Partition, r.Offset, m.id)
		for _, e := range tr.Events {
			t.Logf("    %s %s %s group %s client %s attempt %d %s", e.Time, e.Kind, e.Protocol, e.Group, e.Client, e.Attempt, e.Detail)
		}
		return
	}
	t.Logf("%s: no trace of %s (partition %d offset %d)", l.name, r.Value, r.Partition, r.Offset)
}

// startRemotingLoad: rocketmq-client-go sync sends (two retries) and a
// clustering push consumer, through every member's name server.
func startRemotingLoad(t *testing.T, c *cluster, topic string) *rocketLoad {
	l := &rocketLoad{runner: newRunner(), name: "rocketmq remoting", received: values{}, c: c, topic: topic, group: "chaos-rmq-consumer"}
	ns := primitive.NewPassthroughResolver(c.clientAddrs(3))
	p, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName("chaos-producer"),
		producer.WithInstanceName("chaos-producer"), producer.WithRetry(2), producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(ns), consumer.WithGroupName("chaos-rmq-consumer"),
		consumer.WithInstance("chaos-consumer"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			l.got(string(m.Body))
		}
		return consumer.ConsumeSuccess, nil
	})
	if err == nil {
		err = pc.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	l.stopRecv = func() { once.Do(func() { _ = pc.Shutdown() }) }
	t.Cleanup(l.stopRecv)
	l.goLoop(func(ctx context.Context) {
		defer func() { _ = p.Shutdown() }()
		for i := 0; ctx.Err() == nil; i++ {
			time.Sleep(10 * time.Millisecond)
			body := fmt.Sprintf("r%07d", i)
			res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body)))
			if err == nil && res.Status != primitive.SendOK {
				err = fmt.Errorf("send status %d", res.Status)
			}
			if err == nil {
				l.ackedBy(body, res.MessageQueue.BrokerName)
			}
			l.sent(body, err)
		}
	})
	return l
}

// startGRPCLoad: RocketMQ 5 client sends from senders goroutines (one
// producer) and a SimpleConsumer receiving in batches and acknowledging
// each message, with every member as an endpoint.
func startGRPCLoad(t *testing.T, c *cluster, topic string, senders int) *rocketLoad {
	l := &rocketLoad{runner: newRunner(), name: "rocketmq 5 gRPC", received: values{}, c: c, topic: topic, group: "chaos-grpc-consumer"}
	endpoint := ""
	for i, a := range c.clientAddrs(4) {
		if i > 0 {
			endpoint += ";"
		}
		endpoint += a
	}
	cfg := func(group string) *rmq.Config {
		return &rmq.Config{Endpoint: endpoint, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
	}
	// The client's start asks for the topic's route, which creates it in
	// every group: a group whose new leader has not opened its log for
	// appends within the broker's wait (3 s) answers HA_NOT_AVAILABLE, and
	// the client gives up; a user starts it again.
	var p rmq.Producer
	var err error
	for attempt := 0; ; attempt++ {
		if p, err = rmq.NewProducer(cfg(""), rmq.WithTopics(topic)); err != nil {
			t.Fatal(err)
		}
		if err = p.Start(); err == nil {
			break
		}
		if attempt == 4 {
			t.Fatal(err)
		}
		t.Logf("RocketMQ 5 producer start (try %d): %v", attempt+1, err)
		_ = p.GracefulStop()
		time.Sleep(time.Second)
	}
	// Every message's lifecycle (produced, delivered, acknowledged) is
	// traced, so that a missing one can tell where it stopped.
	if code, err := c.adminTry(context.Background(), t, c.member(1), http.MethodPatch, "/api/v1/topics/"+topic,
		map[string]any{"message_trace": true}, nil); err != nil || code >= 300 {
		t.Logf("tracing %s: %d %v", topic, code, err)
	}
	sc, err := rmq.NewSimpleConsumer(cfg("chaos-grpc-consumer"), rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	recv := newRunner()
	var once sync.Once
	l.stopRecv = func() { once.Do(func() { recv.stop(); _ = sc.GracefulStop() }) }
	t.Cleanup(l.stopRecv)
	recv.goLoop(func(ctx context.Context) {
		for ctx.Err() == nil {
			mvs, err := sc.Receive(ctx, 32, 20*time.Second)
			var es *rmq.ErrRpcStatus
			if err != nil && !(errors.As(err, &es) && es.Code == 40401) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for _, mv := range mvs {
				// Received is delivered, whether or not the ack's answer
				// makes it back (an ack the old leader committed before
				// dying is not redelivered).
				l.got(string(mv.GetBody()))
				_ = sc.Ack(ctx, mv)
			}
		}
	})
	var sending sync.WaitGroup
	for s := range senders {
		sending.Add(1)
		l.goLoop(func(ctx context.Context) {
			defer sending.Done()
			sendGRPC(ctx, l, p, topic, s)
		})
	}
	l.goLoop(func(ctx context.Context) {
		<-ctx.Done()
		sending.Wait()
		_ = p.GracefulStop()
	})
	return l
}

// sendGRPC sends one message every 10 ms until ctx ends, bodies numbered
// within sender s's range.
func sendGRPC(ctx context.Context, l *rocketLoad, p rmq.Producer, topic string, s int) {
	for i := s * 10_000_000; ctx.Err() == nil; i++ {
		time.Sleep(10 * time.Millisecond)
		body := fmt.Sprintf("g%08d", i)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rs, err := p.Send(sctx, &rmq.Message{Topic: topic, Body: []byte(body)})
		cancel()
		if err == nil && len(rs) > 0 && len(rs[0].Endpoints.GetAddresses()) > 0 {
			a := rs[0].Endpoints.GetAddresses()[0]
			l.ackedBy(body, fmt.Sprintf("%s:%d", a.GetHost(), a.GetPort()))
		}
		l.sent(body, err)
	}
}
