package pop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestSnapshotsBesideCheckpoints: snapshot records (which trim the queue,
// waiting for the engine's checkpoint lock) and checkpoints (which capture
// the state, waiting for writers) run side by side with receives and acks
// without deadlocking.
func TestSnapshotsBesideCheckpoints(t *testing.T) {
	ctx := context.Background()
	f := open(t, t.TempDir())
	defer f.close(t)
	name, _ := model.ParseTopicName("busy")
	tp, err := f.b.CreateTopic(ctx, name, 1, broker.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]model.Message, 200)
	for i := range msgs {
		msgs[i] = model.Message{Body: []byte{byte(i)}}
	}
	if _, err := f.b.AppendMessages(ctx, name, 0, msgs); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	go func() {
		for range 100 {
			got, err := f.pop.Receive(ctx, "g", tp.Queues, 2, time.Hour, false, nil)
			if err != nil {
				done <- err
				return
			}
			for _, d := range got {
				if err := f.pop.Ack(ctx, "g", d.Handle); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	go func() {
		for range 50 {
			if err := f.pop.slog.SnapshotAll(ctx, true); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	go func() {
		for range 50 {
			if err := f.engine.Checkpoint(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 3 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("snapshots and checkpoints deadlocked")
		}
	}
}
