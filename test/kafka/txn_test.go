package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceTxn writes bodies in one transaction and commits or aborts it.
func produceTxn(t *testing.T, cl *kgo.Client, topic string, commit bool, bodies ...string) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i, b := range bodies {
		r := &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte(b)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// readAll consumes topic from the start with the isolation level until
// nothing more arrives for a moment; it returns the values in order per
// partition, concatenated.
func readAll(t *testing.T, addr, topic string, committed bool) []string {
	t.Helper()
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl := newClient(t, addr, opts...)
	var out []string
	idle := 0
	for idle < 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, string(r.Value))
			n++
		})
		if n == 0 {
			idle++
		}
	}
	return out
}

func count(vals []string) map[string]int {
	m := map[string]int{}
	for _, v := range vals {
		m[v]++
	}
	return m
}

// TestTransactionsCommitAndAbort: committed transactions are visible to
// read_committed consumers, aborted ones only to read_uncommitted ones —
// also when committed and aborted records share a fetch response.
func TestTransactionsCommitAndAbort(t *testing.T) {
	n := startNode(t)
	addr := n.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxTimeout(t, time.Minute)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "txn-basic"); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, addr, kgo.TransactionalID("txn-basic-1"), kgo.DefaultProduceTopic("txn-basic"))
	var want, aborted []string
	for i := range 6 {
		var bodies []string
		for j := range 7 {
			bodies = append(bodies, fmt.Sprintf("t%d-r%d", i, j))
		}
		commit := i%2 == 0
		produceTxn(t, cl, "txn-basic", commit, bodies...)
		if commit {
			want = append(want, bodies...)
		} else {
			aborted = append(aborted, bodies...)
		}
	}
	got := count(readAll(t, addr, "txn-basic", true))
	if len(got) != len(want) {
		t.Fatalf("read_committed got %d records, want %d: %v", len(got), len(want), got)
	}
	for _, w := range want {
		if got[w] != 1 {
			t.Fatalf("read_committed: %s seen %d times", w, got[w])
		}
	}
	all := count(readAll(t, addr, "txn-basic", false))
	if len(all) != len(want)+len(aborted) {
		t.Fatalf("read_uncommitted got %d records, want %d", len(all), len(want)+len(aborted))
	}
	// The transaction state is described and listed.
	desc, err := adm.DescribeTransactions(ctx, "txn-basic-1")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := desc["txn-basic-1"]; !ok || d.State != "CompleteCommit" && d.State != "CompleteAbort" {
		t.Fatalf("describe: %+v", desc)
	}
	list, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
}

// TestTransactionOpenHoldsLastStableOffset: records of an open transaction
// are held back from read_committed consumers (the last stable offset stays
// below them), and appear once it commits.
func TestTransactionOpenHoldsLastStableOffset(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxTimeout(t, time.Minute)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "txn-open"); err != nil {
		t.Fatal(err)
	}
	plain := newClient(t, addr, kgo.DefaultProduceTopic("txn-open"))
	if err := plain.ProduceSync(ctx, kgo.StringRecord("before")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, addr, kgo.TransactionalID("txn-open-1"), kgo.DefaultProduceTopic("txn-open"))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("inside")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := plain.ProduceSync(ctx, kgo.StringRecord("after")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, addr, "txn-open", true); fmt.Sprint(got) != "[before]" {
		t.Fatalf("read_committed during the transaction: %v", got)
	}
	ends, err := adm.ListEndOffsets(ctx, "txn-open")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("txn-open", 0); o.Offset != 3 {
		t.Fatalf("end offset %d", o.Offset)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, addr, "txn-open", true); fmt.Sprint(got) != "[before inside after]" {
		t.Fatalf("read_committed after the commit: %v", got)
	}
}

// TestTransactionFencingAndTimeout: a second producer with the same
// transactional id fences the first (its open transaction is aborted, its
// commit refused, its records never visible); a transaction left open is
// aborted after its timeout.
func TestTransactionFencingAndTimeout(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxTimeout(t, time.Minute)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "txn-fence"); err != nil {
		t.Fatal(err)
	}
	zombie := newClient(t, addr, kgo.TransactionalID("fenced-id"), kgo.DefaultProduceTopic("txn-fence"))
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctx, kgo.StringRecord("zombie")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fresh := newClient(t, addr, kgo.TransactionalID("fenced-id"), kgo.DefaultProduceTopic("txn-fence"))
	produceTxn(t, fresh, "txn-fence", true, "fresh")
	// The zombie's late writes and commit fail.
	perr := zombie.ProduceSync(ctx, kgo.StringRecord("zombie-late")).FirstErr()
	cerr := zombie.EndTransaction(ctx, kgo.TryCommit)
	if perr == nil && cerr == nil {
		t.Fatal("the fenced producer committed")
	}
	if cerr != nil && !errors.Is(cerr, kerr.ProducerFenced) && !errors.Is(cerr, kerr.InvalidProducerEpoch) && !errors.Is(cerr, kerr.InvalidTxnState) && perr == nil {
		t.Logf("zombie commit error: %v", cerr)
	}
	if got := readAll(t, addr, "txn-fence", true); fmt.Sprint(got) != "[fresh]" {
		t.Fatalf("read_committed: %v", got)
	}

	// An abandoned transaction is aborted after its timeout.
	abandoned := newClient(t, addr, kgo.TransactionalID("abandoned-id"), kgo.DefaultProduceTopic("txn-fence"),
		kgo.TransactionTimeout(2*time.Second))
	if err := abandoned.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := abandoned.ProduceSync(ctx, kgo.StringRecord("abandoned")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the abandoned transaction aborted", func() bool {
		d, err := adm.DescribeTransactions(ctx, "abandoned-id")
		return err == nil && d["abandoned-id"].State == "CompleteAbort"
	})
	produceTxn(t, fresh, "txn-fence", true, "fresh-2")
	if got := readAll(t, addr, "txn-fence", true); fmt.Sprint(got) != "[fresh fresh-2]" {
		t.Fatalf("read_committed after the timeout: %v", got)
	}
}

// TestTransactionAfterTopicDeletion: a transaction whose topic was deleted
// while it was open still commits its other partitions.
func TestTransactionAfterTopicDeletion(t *testing.T) {
	n := startNode(t)
	addr := n.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxTimeout(t, time.Minute)
	for _, topic := range []string{"txn-kept", "txn-deleted"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	cl := newClient(t, addr, kgo.TransactionalID("txn-delete-1"))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"txn-kept", "txn-deleted"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(topic)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adm.DeleteTopics(ctx, "txn-deleted"); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, addr, "txn-kept", true); fmt.Sprint(got) != "[txn-kept]" {
		t.Fatalf("read_committed: %v", got)
	}
}
