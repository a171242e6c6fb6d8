// Package replay_test checks that a node's state is a function of its log:
// a node built from a copy of another node's logs alone (the commit log
// and the local area of garbage-collection copies, with the placement and
// configuration of the metadata store, but no checkpoint, index or key
// files) reaches the same state, and so does one restarting from the
// checkpoint and the tail.
package replay_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/testutil"
)

// TestReplayEquivalence runs a workload through real clients — Kafka
// idempotent and transactional producers (committed, aborted, open),
// classic and KIP-848 groups committing with leader epochs, DeleteRecords,
// a compacted topic cleaned; RocketMQ delay levels and half transactions
// checked back through the remoting client — plus POP receive, ack,
// deadline change and dead-lettering, pending and delivered timers, then
// retention, garbage collection into the local area and reclamation of
// segments. It compares the node's state dump with those of nodes built
// from a copy of its data: whole (checkpoint plus tail) and its logs alone.
func TestReplayEquivalence(t *testing.T) {
	dir := t.TempDir()
	cfg := replayConfig(filepath.Join(dir, "origin"))
	n := apptest.StartTestNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ProducerBatchMaxBytes(32<<10), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "trimmed"); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		topic := "orders"
		if i%4 == 0 {
			topic = "trimmed"
		}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint("k", i%97)), Value: []byte(fmt.Sprint("v", i))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var dr kadm.Offsets
	dr.Add(kadm.Offset{Topic: "trimmed", Partition: 0, At: 100})
	if _, err := adm.DeleteRecords(ctx, dr); err != nil {
		t.Fatal(err)
	}

	// A consumer group consumes part of the topic and commits.
	c, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("replay-g"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < 500; {
		fs := c.PollRecords(ctx, 100)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
		if err := c.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	// A KIP-848 (consumer protocol) group too.
	c848, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("replay-848"),
		kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < 300; {
		fs := c848.PollRecords(ctx, 100)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
		if err := c848.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c848.Close()

	// The state queues snapshotted and trimmed: the records that follow are
	// replayed on top of the snapshots.
	if err := n.App.Broker().SnapshotStates(ctx); err != nil {
		t.Fatal(err)
	}

	// Kafka transactions: one committed, one aborted, one left open.
	for i, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		tx, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.TransactionalID(fmt.Sprint("replay-tx-", i)), kgo.ProducerBatchMaxBytes(32<<10))
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 20 {
			tx.Produce(ctx, &kgo.Record{Topic: "trimmed", Value: []byte(fmt.Sprint("tx", i, "-", j))}, nil)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
		tx.Close()
	}
	open, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.TransactionalID("replay-tx-open"), kgo.ProducerBatchMaxBytes(32<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	open.Produce(ctx, &kgo.Record{Topic: "trimmed", Partition: 1, Value: []byte("pending")}, nil)
	if err := open.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	// POP: a group receives, acknowledges, changes a deadline; another
	// starts from the offset its group had committed, which moves later
	// (a replay must start it where it started, not at the new commit).
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "popped"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "popped", Value: []byte(fmt.Sprint("p", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(group string, at int64) {
		var offs kadm.Offsets
		offs.Add(kadm.Offset{Topic: "popped", Partition: 0, At: at, LeaderEpoch: -1})
		if _, err := adm.CommitOffsets(ctx, group, offs); err != nil {
			t.Fatal(err)
		}
	}
	commit("pop-late", 3)
	p := n.App.Pop()
	popped, err := n.App.Broker().Topic(model.TopicName{Tenant: "public", Namespace: "default", Topic: "popped"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.ReceiveLive(ctx, "pop-g", popped.Queues, 5, time.Hour, false, nil)
	if err != nil || len(got) != 5 {
		t.Fatalf("pop receive: %d %v", len(got), err)
	}
	for _, d := range got[:2] {
		if err := p.Ack(ctx, "pop-g", d.Handle); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.ChangeInvisible(ctx, "pop-g", got[2].Handle, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := p.DeadLetter(ctx, "pop-g", &got[3]); err != nil { // to %DLQ%pop-g, acknowledged
		t.Fatal(err)
	}
	if late, err := p.ReceiveLive(ctx, "pop-late", popped.Queues, 2, time.Hour, false, nil); err != nil || len(late) != 2 || late[0].Offset != 3 {
		t.Fatalf("pop from the committed offset: %+v %v", late, err)
	}
	commit("pop-late", 8)
	if grpcPopWorkload != nil {
		grpcPopWorkload(ctx, t, n)
	}

	// Timer messages: some delivered before the dump, some pending far ahead.
	b := n.App.Broker()
	orders, err := model.ParseTopicName("orders")
	if err != nil {
		t.Fatal(err)
	}
	now := b.Now()
	for i := range 6 {
		due := now.Add(time.Hour + time.Duration(i)*time.Minute).UnixMilli()
		if i < 2 {
			due = now.Add(200 * time.Millisecond).UnixMilli()
		}
		if _, _, err := b.AppendTimer(ctx, orders, int32(i%4), model.Message{Body: []byte(fmt.Sprint("timer", i))}, due); err != nil {
			t.Fatal(err)
		}
	}
	apptest.Eventually(t, 10*time.Second, "the due timers delivered", func() bool {
		ol, err := adm.ListEndOffsets(ctx, "orders")
		if err != nil {
			return false
		}
		var sum int64
		ol.Each(func(o kadm.ListedOffset) { sum += o.Offset })
		return sum == 1500+2
	})

	// A compacted topic cleaned; RocketMQ delay levels and transactions
	// with a check-back; then retention, garbage collection (copies to the
	// local area) and segment reclamation.
	compactedWorkload(ctx, t, n, cl, adm)
	bulkWorkload(ctx, t, cl, adm)
	rocketmqWorkload(ctx, t, n)
	apptest.Eventually(t, 20*time.Second, "the level-1 delayed message, the 1-second timer and two committed transactions delivered", func() bool {
		ol, err := adm.ListEndOffsets(ctx, "orders")
		if err != nil {
			return false
		}
		var sum int64
		ol.Each(func(o kadm.ListedOffset) { sum += o.Offset })
		return sum == 1500+2+4
	})
	if _, err := b.RunRetention(ctx); err != nil {
		t.Fatal(err)
	}
	gc, err := b.Engine().GC(ctx, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunRetention(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("garbage collection: %+v; logs %+v", gc, b.Engine().LogStats())
	if gc.Relocated == 0 || gc.Deleted == 0 {
		t.Fatalf("garbage collection relocated %d segments, deleted %d", gc.Relocated, gc.Deleted)
	}
	// POP progress committed as group offsets (a periodic pass otherwise).
	n.App.Pop().CommitBases(ctx)
	// Clean what the later writes left to compact, so that a node started
	// from a copy finds nothing due (its first pass cleans everything due).
	if _, err := b.RunCompaction(ctx, true); err != nil {
		t.Fatal(err)
	}
	want, err := n.App.StateDump()
	if err != nil {
		t.Fatal(err)
	}
	n.Stop(t)
	for _, must := range []string{"offset replay-g public/default/orders/", "offset replay-848 public/default/orders/", "queue public/default/trimmed/0 start=100 ", "timers from=0 entries=10",
		"transaction {ID:replay-tx-0", "txn-open ", "txn-aborted ", "pop pop-g/", "pop pop-late/", "queue public/default/%DLQ%pop-g/0 start=0 hw=1 end=1", "compacted public/default/compacted/0 kept=["} {
		if !strings.Contains(want, must) {
			t.Fatalf("the origin's dump lacks %q:\n%s", must, want)
		}
	}
	if grpcPopWorkload != nil && !(strings.Contains(want, "pop grpc-pop/") && strings.Contains(want, "queue public/default/%DLQ%grpc-dlq/0 start=0 hw=10 end=10")) {
		t.Fatalf("the origin's dump lacks the gRPC consumer's POP state:\n%s", want)
	}
	if strings.Contains(want, "producers 0100000000\n") { // a snapshot of no states
		t.Fatal("the origin's dump has no producer states")
	}

	for _, tc := range []struct {
		name    string
		logOnly bool
	}{{"checkpoint-and-tail", false}, {"log-alone", true}} {
		copyDir := filepath.Join(dir, tc.name)
		copyData(t, filepath.Join(dir, "origin"), copyDir, tc.logOnly)
		m := apptest.StartTestNode(t, replayConfig(copyDir))
		got, err := m.App.StateDump()
		if err != nil {
			t.Fatal(err)
		}
		m.Stop(t)
		if got != want {
			t.Errorf("%s: state differs from the origin's:\n%s", tc.name, testutil.DiffLines(want, got))
		}
	}
}

// replayConfig has small segments, so that garbage collection and
// reclamation have sealed segments to work on, and short RocketMQ
// transaction check-backs. The state queues are snapshotted and POP
// progress committed as offsets only when the test says so: a periodic
// pass between the origin's dump and its stop would write records the
// dump does not reflect.
func replayConfig(dir string) app.Config {
	c := apptest.TestConfig(dir)
	c.Broker.StateSnapshotInterval = time.Hour
	c.Storage.SegmentSize = 1 << 20
	c.Storage.MaxRecordSize = 256 << 10
	c.Broker.TransactionTimeout = time.Second
	c.Broker.TransactionCheckInterval = time.Second
	return c
}

// copyData copies a node's data directory; logOnly keeps only the commit
// log, the node identity and the metadata store (placement and config).
func copyData(t *testing.T, from, to string, logOnly bool) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if logOnly && info.Mode().IsRegular() {
			slashed := filepath.ToSlash(rel)
			if !strings.HasPrefix(slashed, "storage/log/") && !strings.HasPrefix(slashed, "storage/local/") && slashed != "storage/identity" && slashed != "meta.db" {
				return nil
			}
		}
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
