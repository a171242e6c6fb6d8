package serving

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Appends that arrive while a call is under way go together in the next
// one; each caller gets its own records' offsets, or the call's error.
func TestAppendBatcher(t *testing.T) {
	var b appendBatcher
	var calls atomic.Int32
	var next atomic.Int64
	release := make(chan struct{})
	send := func(_ appendKey, recs []*storage.Record) error {
		if calls.Add(1) == 1 {
			<-release // the first call holds the others back
		}
		for _, r := range recs {
			r.BaseOffset = model.QueueOffset(next.Add(1) - 1)
		}
		return nil
	}
	k := appendKey{group: 3}
	var wg sync.WaitGroup
	got := make([]model.QueueOffset, 50)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &storage.Record{Count: 1}
			if err := b.append(context.Background(), k, []*storage.Record{r}, send); err != nil {
				t.Error(err)
			}
			got[i] = r.BaseOffset
		}()
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // the first call is under way
		}
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	seen := map[model.QueueOffset]bool{}
	for _, o := range got {
		seen[o] = true
	}
	if len(seen) != len(got) {
		t.Fatalf("offsets handed out twice: %v", got)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d calls for 50 appends, want 2 (one, then the 49 that waited)", n)
	}
	failed := errors.New("group gone")
	if err := b.append(context.Background(), k, []*storage.Record{{Count: 1}}, func(appendKey, []*storage.Record) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("a failed call answered %v", err)
	}
}
