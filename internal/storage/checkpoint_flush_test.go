package storage

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestCheckpointCoversFlushInFlight appends while the index-flush loop
// runs all the time and checkpoints are taken: every checkpoint's queue
// state covers every record before the checkpoint's position (a flush
// half done when the state is captured would leave the entries of records
// before it out, and recovery, replaying from the position, would skip
// their offsets).
func TestCheckpointCoversFlushInFlight(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.IndexFlushInterval = 50 * time.Microsecond
	cfg.CheckpointInterval = time.Hour
	cfg.MinFreeBytes, cfg.MinFreeRatio = 0, 0
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if err := e.CreateQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	type appended struct {
		pos  model.LogPos
		base model.QueueOffset
	}
	var mu sync.Mutex
	var recs []appended
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			batch := make([]*Record, 8)
			for i := range batch {
				batch[i] = &Record{Queue: 1, Count: 1, Payload: []byte("payload")}
			}
			if err := e.AppendWith(ctx, batch, AppendOptions{NoWait: true}); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, r := range batch {
				recs = append(recs, appended{r.Pos, r.BaseOffset})
			}
			mu.Unlock()
		}
	}()
	defer func() { close(stop); <-done }()
	for i := 0; i < 300; i++ {
		if err := e.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		ck, err := readCheckpoint(filepath.Join(cfg.Dir, checkpointName))
		if err != nil {
			t.Fatal(err)
		}
		var next model.QueueOffset
		for _, q := range ck.Queues {
			if q.ID == 1 {
				next = q.State.Next
			}
		}
		mu.Lock()
		for _, r := range recs {
			if r.pos < ck.LogPos && r.base >= next {
				mu.Unlock()
				t.Fatalf("checkpoint %d at %d: record of offset %d at %d before it, but the queue's state ends at %d", i, ck.LogPos, r.base, r.pos, next)
			}
		}
		mu.Unlock()
	}
}
