package storage

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestPowerLossSync: in sync mode every append acknowledged before a power
// loss (which drops whatever was not fsynced) is there after recovery, in
// order, once per offset, and the queue goes on from its end.
func TestPowerLossSync(t *testing.T) {
	dir := t.TempDir()
	c := testConfig(dir)
	c.Durability = DurabilitySync
	e := openEngine(t, c)
	ctx := context.Background()
	if err := e.CreateQueues(ctx, []model.QueueID{1, 2}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[model.QueueID]map[model.QueueOffset][]byte{1: {}, 2: {}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := model.QueueID(1 + w%2)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := []byte(fmt.Sprintf("w%d-%d", w, i))
				r := &Record{Queue: q, Count: 1, Payload: p}
				if err := e.Append(ctx, []*Record{r}); err != nil {
					return // the log stopped under us
				}
				mu.Lock()
				acked[q][r.BaseOffset] = p
				mu.Unlock()
			}
		}()
	}
	// The power goes while appends are in flight (some written, not synced).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := min(len(acked[1]), len(acked[2]))
		mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d appends acknowledged", n)
		}
	}
	if err := e.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()

	e = openEngine(t, c)
	defer e.Close()
	for q, want := range acked {
		if len(want) == 0 {
			t.Fatalf("queue %d: nothing acknowledged", q)
		}
		got := readAll(t, e, q, 0)
		for off, p := range want {
			if int(off) >= len(got) || !bytes.Equal(got[off], p) {
				t.Fatalf("queue %d: acknowledged offset %d lost or changed (%d records recovered)", q, off, len(got))
			}
		}
		r := &Record{Queue: q, Count: 1, Payload: []byte("after")}
		if err := e.Append(ctx, []*Record{r}); err != nil || int(r.BaseOffset) != len(got) {
			t.Fatalf("queue %d: append after recovery at %d (%v), want %d", q, r.BaseOffset, err, len(got))
		}
	}
}

// TestPowerLossAsync: in async mode a power loss drops what was not synced
// yet; recovery keeps exactly the synced prefix, readable, and the queue
// goes on from its end with dense offsets.
func TestPowerLossAsync(t *testing.T) {
	dir := t.TempDir()
	c := testConfig(dir)
	c.Durability = DurabilityAsync
	c.FlushInterval = time.Hour // no background sync: the test decides
	e := openEngine(t, c)
	ctx := context.Background()
	if err := e.CreateQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 0, 50)
	if err := e.checkpoint(); err != nil { // syncs everything so far
		t.Fatal(err)
	}
	appendN(t, e, 1, 50, 30) // written, never synced
	if err := e.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, c)
	defer e.Close()
	got := readAll(t, e, 1, 0)
	if len(got) != 50 {
		t.Fatalf("%d records recovered, want the 50 synced", len(got))
	}
	for i, p := range got {
		if !bytes.Equal(p, msg(1, i)) {
			t.Fatalf("record %d differs", i)
		}
	}
	appendN(t, e, 1, 50, 5) // offsets go on densely from the recovered end
}
