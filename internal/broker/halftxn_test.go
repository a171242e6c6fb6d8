package broker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// bodies reads the bodies in a topic's queue 0.
func bodies(t *testing.T, b *Broker, name model.TopicName) []string {
	t.Helper()
	res, err := b.Read(name, 0, 0, ReadOptions{MaxRecords: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	var out []string
	for _, r := range res.Records {
		m, err := DecodeMessage(r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.Header(HeaderRealTopic); ok && name != DiscardTopic {
			t.Fatalf("internal header delivered: %+v", m.Headers)
		}
		out = append(out, string(m.Body))
	}
	return out
}

func halfMsg(body, group string) model.Message {
	return model.Message{Body: []byte(body), Headers: []model.Header{
		{Key: HeaderTransactionPrepared, Value: []byte("true")}, {Key: HeaderProducerGroup, Value: []byte(group)},
		{Key: HeaderUniqKey, Value: []byte("id-" + body)}}}
}

// TestHalfMessagesCommitRollbackAndRestart: a half message is invisible
// until committed; a rolled-back one never appears; ending one for the
// wrong group or twice fails; a half pending across a restart is checked
// afterwards, with its check count kept, and discarded after the maximum.
func TestHalfMessagesCommitRollbackAndRestart(t *testing.T) {
	synctest.Test(t, testHalfMessages)
}

// testHalfMessages runs on the fake clock of a synctest bubble: the checks
// come at the configured times.
func testHalfMessages(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{AutoCreateTopics: true, TxnTimeout: 300 * time.Millisecond, TxnCheckInterval: 200 * time.Millisecond, TxnCheckMax: 4}
	f := openWith(t, dir, opts)
	name, _ := model.ParseTopicName("orders")
	if _, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var checked []TxnCheck
	checker := func(c TxnCheck) bool {
		mu.Lock()
		checked = append(checked, c)
		mu.Unlock()
		return true
	}
	f.b.AddTxnChecker(checker)
	offs := map[string]model.QueueOffset{}
	for _, body := range []string{"commit", "rollback", "pending"} {
		off, err := f.b.AppendHalf(ctx, name, 0, halfMsg(body, "g"))
		if err != nil {
			t.Fatal(err)
		}
		offs[body] = off
	}
	if got := bodies(t, f.b, name); len(got) != 0 {
		t.Fatalf("half messages visible: %v", got)
	}
	if _, _, _, err := f.b.EndTransaction(ctx, "other", offs["commit"], true); !errors.Is(err, ErrHalfGroupMismatch) {
		t.Fatalf("wrong group: %v", err)
	}
	if _, _, off, err := f.b.EndTransaction(ctx, "g", offs["commit"], true); err != nil || off != 0 {
		t.Fatalf("commit: %d %v", off, err)
	}
	if _, _, _, err := f.b.EndTransaction(ctx, "g", offs["commit"], true); !errors.Is(err, ErrHalfNotPending) {
		t.Fatalf("second commit: %v", err)
	}
	if _, _, _, err := f.b.EndTransaction(ctx, "g", offs["rollback"], false); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, f.b, name); len(got) != 1 || got[0] != "commit" {
		t.Fatalf("after commit and rollback: %v", got)
	}
	if st := f.b.TxnStats(); st.Pending != 1 || st.Committed != 1 || st.RolledBack != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Two checks, then a restart.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(checked)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checks")
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.close(t)
	mu.Lock()
	first := checked[0]
	before := len(checked)
	mu.Unlock()
	if first.Group != "g" || first.Offset != offs["pending"] || string(first.Message.Body) != "pending" {
		t.Fatalf("check %+v", first)
	}
	f = openWith(t, dir, opts)
	defer f.close(t)
	f.b.AddTxnChecker(checker)
	if st := f.b.TxnStats(); st.Pending != 1 {
		t.Fatalf("pending after restart: %+v", st)
	}
	// It is checked again until the maximum (4), then discarded.
	deadline = time.Now().Add(5 * time.Second)
	for f.b.TxnStats().Discarded == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not discarded: %+v", f.b.TxnStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	total := len(checked)
	mu.Unlock()
	if total != 4 || before < 2 {
		t.Fatalf("%d checks (%d before the restart), want 4", total, before)
	}
	if got := bodies(t, f.b, DiscardTopic); len(got) != 1 || got[0] != "pending" {
		t.Fatalf("discard topic: %v", got)
	}
	if got := bodies(t, f.b, name); len(got) != 1 {
		t.Fatalf("topic after discard: %v", got)
	}
}

// TestHalfCommitAcrossRestart: a half committed before a restart stays
// delivered once; one pending is still committable after it.
func TestHalfCommitAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{AutoCreateTopics: true, TxnTimeout: time.Hour}
	f := openWith(t, dir, opts)
	name, _ := model.ParseTopicName("orders")
	if _, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var offs []model.QueueOffset
	for _, body := range []string{"a", "b", "c"} {
		off, err := f.b.AppendHalf(ctx, name, 0, halfMsg(body, "g"))
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	if _, _, _, err := f.b.EndTransaction(ctx, "g", offs[1], true); err != nil {
		t.Fatal(err)
	}
	f.close(t)
	f = openWith(t, dir, opts)
	defer f.close(t)
	if _, _, _, err := f.b.EndTransaction(ctx, "g", offs[1], true); !errors.Is(err, ErrHalfNotPending) {
		t.Fatalf("committed half pending again: %v", err)
	}
	if _, _, _, err := f.b.EndTransaction(ctx, "g", offs[0], true); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := f.b.EndTransaction(ctx, "g", offs[2], false); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, f.b, name); len(got) != 2 || got[0] != "b" || got[1] != "a" {
		t.Fatalf("delivered %v", got)
	}
	if st := f.b.TxnStats(); st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}
