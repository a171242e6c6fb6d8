package txn

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

type node struct {
	e *storage.Engine
	m *meta.BoltStore
	b *broker.Broker
	c *Coordinator
}

func openNode(t *testing.T, dir string, legacy func(*broker.Broker, *meta.BoltStore)) *node {
	t.Helper()
	ctx := context.Background()
	sc := storage.DefaultConfig(filepath.Join(dir, "data"))
	sc.SegmentSize, sc.MaxRecordSize, sc.MinFreeBytes, sc.MinFreeRatio = 1<<20, 256<<10, 0, 0
	e, err := storage.Open(sc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(ctx, e, m, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if legacy != nil {
		legacy(b, m)
	}
	ids := producers.New(m, producers.Options{})
	c, err := New(ctx, b, ids, producers.NewTxnIndex(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &node{e: e, m: m, b: b, c: c}
}

func (n *node) close() {
	n.c.Close()
	n.b.Close()
	n.e.Close()
	n.m.Close()
}

// TestLegacyStateMigrates: transaction states older versions kept in the
// metadata store (a snapshot plus their single queue after it) move into
// the state queues, the old keys go, and the log alone keeps them.
func TestLegacyStateMigrates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := openNode(t, dir, func(b *broker.Broker, m *meta.BoltStore) {
		tp, err := b.EnsureInternalTopic(ctx, StateTopic, 1, broker.TopicConfig{})
		if err != nil {
			t.Fatal(err)
		}
		old := Status{ID: "old", PID: 5, Epoch: 1, LastEpoch: -1, TimeoutMs: 60000, State: StateCompleteCommit, StartMs: -1}
		if _, err := m.Txn(ctx, nil, []meta.Op{{Key: legacySnapshotPrefix + "old", Value: encodeStatus(&old)},
			{Key: legacyAppliedKey, Value: []byte("0")}}); err != nil {
			t.Fatal(err)
		}
		newer := Status{ID: "newer", PID: 6, Epoch: 0, LastEpoch: -1, TimeoutMs: 60000, State: StateEmpty, StartMs: -1}
		r := b.MessageRecord(tp.Queues[0], &model.Message{Key: []byte("newer"), Body: encodeStatus(&newer)})
		if err := b.Engine().Append(ctx, []*storage.Record{r}); err != nil {
			t.Fatal(err)
		}
	})
	check := func(when string) {
		t.Helper()
		for id, pid := range map[string]int64{"old": 5, "newer": 6} {
			if st, err := n.c.Describe(id); err != nil || st.PID != pid {
				t.Fatalf("%s: %s is %+v %v", when, id, st, err)
			}
		}
	}
	check("migrated")
	if kvs, _ := n.m.List(ctx, "txn/"); len(kvs) != 0 {
		t.Fatalf("legacy keys left: %v", kvs)
	}
	n.close()
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, dir, nil)
	defer n.close()
	check("from the log alone")
}
