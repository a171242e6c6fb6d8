package pop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestLegacyStateMigrates: POP states older versions kept in the metadata
// store move into the POP queue, the old keys go, and the log alone keeps
// them.
func TestLegacyStateMigrates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("popped")
	tp, err := f.b.CreateTopic(ctx, name, 1, broker.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q := tp.Queues[0]
	f.close(t)
	// What an older version left: a state in the metadata store.
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	st := &state{base: 3, next: 5, gen: 2, leases: map[model.QueueOffset]*lease{4: {deadline: 1 << 50, attempts: 1, gen: 2}},
		done: map[model.QueueOffset]bool{}}
	if _, err := m.Txn(ctx, nil, []meta.Op{{Key: fmt.Sprintf("%s%d/g", legacySnapshotPrefix, q), Value: st.encode()},
		{Key: legacyAppliedKey, Value: []byte("0")}}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil { // an older version's has no section
		t.Fatal(err)
	}
	want := fmt.Sprintf("pop g/%d base=3 next=5 gen=2", q)
	f = open(t, dir)
	if d := f.pop.Dump(); !strings.Contains(d, want) {
		t.Fatalf("migrated state: %s", d)
	}
	if kvs, _ := f.meta.List(ctx, "pop/"); len(kvs) != 0 {
		t.Fatalf("legacy keys left: %v", kvs)
	}
	f.close(t)
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil {
		t.Fatal(err)
	}
	f = open(t, dir)
	defer f.close(t)
	if d := f.pop.Dump(); !strings.Contains(d, want) {
		t.Fatalf("from the log alone: %s", d)
	}
}
