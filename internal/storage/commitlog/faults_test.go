package commitlog

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

var errInjected = errors.New("injected I/O error")

// TestFailedFsyncIsSticky: after one failed fsync nothing more is
// acknowledged — not the records it covered, not later ones, even when a
// later fsync would succeed (the kernel may have dropped the pages) — until
// the log is reopened, which recovers what is really on disk.
func TestFailedFsyncIsSticky(t *testing.T) {
	dir := t.TempDir()
	var failSync atomic.Bool
	faults := &Faults{Sync: func(string) error {
		if failSync.Load() {
			return errInjected
		}
		return nil
	}}
	l, err := Open(Options{Dir: dir, SegmentSize: 1 << 20, Mode: SyncAlways, Faults: faults}, Recovery{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	appendOne := func(i int) (model.LogPos, error) {
		return l.Append([]*Entry{{Queue: 1, Count: 1, Payload: payload(i)}}, nil)
	}
	end, err := appendOne(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SyncTo(ctx, end); err != nil {
		t.Fatalf("healthy sync: %v", err)
	}
	synced := l.Synced()

	failSync.Store(true)
	end, err = appendOne(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SyncTo(ctx, end); !errors.Is(err, errInjected) {
		t.Fatalf("wait after a failed fsync: %v, want the injected error", err)
	}
	failSync.Store(false)
	if _, err := appendOne(2); !errors.Is(err, errInjected) {
		t.Fatalf("append after a failed fsync: %v", err)
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
	if err := l.WaitSynced(ctx, end); !errors.Is(err, errInjected) {
		t.Fatalf("a later fsync acknowledged records after a failed one: %v", err)
	}
	if l.Synced() != synced {
		t.Fatalf("synced moved from %d to %d after the failure", synced, l.Synced())
	}
	l.Close()

	// A restart recovers from the files (here the page cache still holds
	// record 1) and appends again.
	l, err = Open(Options{Dir: dir, SegmentSize: 1 << 20, Mode: SyncAlways}, Recovery{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := appendOne(3); err != nil {
		t.Fatalf("append after restart: %v", err)
	}
}

// TestFailedWriteIsSticky: a failed segment write refuses every later
// append.
func TestFailedWriteIsSticky(t *testing.T) {
	var failWrite atomic.Bool
	faults := &Faults{Write: func(string) error {
		if failWrite.Load() {
			return errInjected
		}
		return nil
	}}
	l, err := Open(Options{Dir: t.TempDir(), SegmentSize: 1 << 20, Mode: SyncAsync, Faults: faults}, Recovery{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	failWrite.Store(true)
	big := make([]byte, 64<<10) // written with pwritev, not through the mapping
	if _, err := l.Append([]*Entry{{Queue: 1, Count: 1, Payload: big}}, nil); !errors.Is(err, errInjected) {
		t.Fatalf("append with a failing write: %v", err)
	}
	failWrite.Store(false)
	if _, err := l.Append([]*Entry{{Queue: 1, Count: 1, Payload: payload(1)}}, nil); !errors.Is(err, errInjected) {
		t.Fatalf("append after a failed write: %v", err)
	}
	if !errors.Is(l.Err(), errInjected) {
		t.Fatalf("Err: %v", l.Err())
	}
}
