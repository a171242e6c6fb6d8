package kafka_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaExactlyOnceAcrossCrashes runs a franz-go GroupTransactSession
// consume-transform-produce loop over 100,000 records between two topics
// while the node (sync durability) is SIGKILLed and restarted twice. The
// output read with read_committed holds each input record exactly once.
func TestKafkaExactlyOnceAcrossCrashes(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	const (
		records    = 100_000
		partitions = 4
		in, out    = "eos-in", "eos-out"
	)
	dir := t.TempDir()
	addr := freeLoopbackAddr(t)
	var child atomicCmd
	child.start(t, dir, addr)
	defer child.kill()
	ctx := ctxTimeout(t, 8*time.Minute)
	adm := kadm.NewClient(newClient(t, addr))
	for _, topic := range []string{in, out} {
		if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	src := newClient(t, addr, kgo.DefaultProduceTopic(in), kgo.ProducerLinger(5*time.Millisecond))
	for i := range records {
		src.Produce(ctx, kgo.StringRecord(fmt.Sprintf("r%06d", i)), func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("input produce: %v", err)
			}
		})
	}
	if err := src.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(addr), kgo.TransactionalID("eos-copier"),
		kgo.ConsumerGroup("eos-group"), kgo.ConsumeTopics(in), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(), kgo.DefaultProduceTopic(out), kgo.TransactionTimeout(10*time.Second),
		kgo.FetchMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var committed atomic.Int64
	var aborts atomic.Int64
	var inTxn atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for committed.Load() < records && ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			fs := sess.PollRecords(pctx, 1000) // transactions of up to 1,000 records
			cancel()
			if fs.NumRecords() == 0 {
				continue
			}
			if err := sess.Begin(); err != nil {
				t.Errorf("begin: %v", err)
				return
			}
			inTxn.Store(true)
			n := int64(0)
			fs.EachRecord(func(r *kgo.Record) {
				n++
				sess.Produce(ctx, &kgo.Record{Key: r.Value, Value: append([]byte("out-"), r.Value...)}, nil)
			})
			ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ok, err := sess.End(ectx, kgo.TryCommit)
			cancel()
			inTxn.Store(false)
			if ok && err == nil {
				committed.Add(n)
			} else {
				aborts.Add(1)
			}
		}
	}()
	for _, at := range []int64{records / 5, records / 2} {
		for (committed.Load() < at || !inTxn.Load()) && ctx.Err() == nil {
			select {
			case <-done:
				t.Fatalf("the copy finished before the kill at %d records", at)
			case <-time.After(time.Millisecond):
			}
		}
		child.kill() // inside a transaction
		t.Logf("killed at %d records committed", committed.Load())
		child.start(t, dir, addr)
	}
	<-done
	if ctx.Err() != nil {
		t.Fatalf("ran out of time with %d records committed", committed.Load())
	}

	c := newClient(t, addr, kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxBytes(16<<20))
	seen := make(map[string]bool, records)
	for len(seen) < records {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := c.PollFetches(fctx)
		cancel()
		if fs.NumRecords() == 0 && fctx.Err() != nil {
			t.Fatalf("read %d of %d output records", len(seen), records)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if seen[v] {
				t.Fatalf("output record %s seen twice (offset %d)", v, r.Offset)
			}
			seen[v] = true
		})
	}
	// Nothing more: no duplicates after the last expected record.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	fs := c.PollFetches(fctx)
	cancel()
	if n := fs.NumRecords(); n > 0 {
		t.Fatalf("%d records beyond the %d expected", n, records)
	}
	for i := range records {
		if !seen[fmt.Sprintf("out-r%06d", i)] {
			t.Fatalf("output lacks record %d", i)
		}
	}
	t.Logf("%d records copied exactly once across 2 SIGKILLs (%d transactions aborted on the way)", records, aborts.Load())
}
