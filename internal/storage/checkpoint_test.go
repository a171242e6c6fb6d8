package storage

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(checkpointData{LogPos: 4096, Queues: []queueCheckpoint{{ID: 1, State: queueindex.State{First: 0, Flushed: 10, Next: 30, Start: 5, MaxTime: 77}}}}))
	f.Add(encodeCheckpoint(checkpointData{}))
	f.Add(encodeCheckpoint(checkpointData{LogPos: 7, Sections: map[string][]byte{"a": {1, 2, 3}, "bb": nil}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		again, err := decodeCheckpoint(encodeCheckpoint(c))
		if err != nil || again.LogPos != c.LogPos || len(again.Queues) != len(c.Queues) || len(again.Sections) != len(c.Sections) {
			t.Fatalf("re-encoding differs: %v", err)
		}
		for name, data := range c.Sections {
			if string(again.Sections[name]) != string(data) {
				t.Fatalf("section %q differs", name)
			}
		}
	})
}

// countingKeeper counts records per queue: its snapshot plus the replayed
// records must equal what was appended.
type countingKeeper struct {
	mu     sync.Mutex
	counts map[model.QueueID]model.QueueOffset // next offset seen per queue
}

func (k *countingKeeper) Name() string { return "counting" }

func (k *countingKeeper) Capture() ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b []byte
	for q, n := range k.counts {
		b = append(b, byte(q), byte(n))
	}
	return b, nil
}

func (k *countingKeeper) Restore(b []byte) error {
	for i := 0; i+1 < len(b); i += 2 {
		k.counts[model.QueueID(b[i])] = model.QueueOffset(b[i+1])
	}
	return nil
}

func (k *countingKeeper) Replay(_ model.LogPos, r *ReplayedRecord) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if end := r.BaseOffset + model.QueueOffset(r.Count); end > k.counts[r.Queue] {
		k.counts[r.Queue] = end
	}
}

func (k *countingKeeper) observe(q model.QueueID, end model.QueueOffset) {
	k.mu.Lock()
	k.counts[q] = max(k.counts[q], end)
	k.mu.Unlock()
}

func TestStateKeeperCheckpointAndReplay(t *testing.T) {
	dir := t.TempDir()
	c := testConfig(dir)
	k := &countingKeeper{counts: map[model.QueueID]model.QueueOffset{}}
	c.StateKeepers = []StateKeeper{k}
	e := openEngine(t, c)
	if err := e.CreateQueue(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 0, 20)
	k.observe(1, 20)
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 20, 15)
	k.observe(1, 35)
	crash(e) // no final checkpoint

	k2 := &countingKeeper{counts: map[model.QueueID]model.QueueOffset{}}
	c.StateKeepers = []StateKeeper{k2}
	e2 := openEngine(t, c)
	defer e2.Close()
	if want := map[model.QueueID]model.QueueOffset{1: 35}; !reflect.DeepEqual(k2.counts, want) {
		t.Fatalf("restored and replayed state %v, want %v", k2.counts, want)
	}
}
