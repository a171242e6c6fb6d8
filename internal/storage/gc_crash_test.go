package storage_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

const gcCrashChildEnv = "ROSETTA_GC_CRASH_CHILD_DIR"

func gcCrashConfig(dir string) storage.Config {
	c := crashConfig(dir)
	c.SegmentSize = 256 << 10
	c.MaxRecordSize = 32 << 10
	c.GCMinorInterval, c.GCMajorInterval = -1, -1 // the child drives passes itself
	c.RetentionInterval = time.Hour
	return c
}

// TestGCCrashChild is the child of TestGCCrashRecovery: it appends to two
// short-lived queues (trimmed to their last few records all the time), two
// kept ones and one compacted by key, logging every acknowledged record,
// while compaction, garbage collection and reclamation run back to back,
// until it is killed.
func TestGCCrashChild(t *testing.T) {
	dir := os.Getenv(gcCrashChildEnv)
	if dir == "" {
		t.Skip("run by TestGCCrashRecovery")
	}
	e, err := storage.Open(gcCrashConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	if err := e.CreateQueues(ctx, []model.QueueID{1, 2, 3, 4, 5}); err != nil {
		os.Exit(4)
	}
	acks, err := os.OpenFile(filepath.Join(dir, "acks"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		os.Exit(5)
	}
	var mu sync.Mutex
	for g := 0; g < 4; g++ {
		go func(g int) {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g)))
			for {
				q := model.QueueID(1 + rng.IntN(5))
				p := make([]byte, 16+rng.IntN(6000))
				for k := range p {
					p[k] = byte(rng.Uint32())
				}
				if q == 5 {
					p[0] = byte(rng.IntN(20)) // the compaction key
				}
				r := &storage.Record{Queue: q, Count: 1, Payload: p}
				if err := e.Append(ctx, []*storage.Record{r}); err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(6)
				}
				mu.Lock()
				fmt.Fprintf(acks, "%d %d %s\n", r.Queue, r.BaseOffset, gcHash(r.Queue, r.Payload))
				mu.Unlock()
			}
		}(g)
	}
	for {
		for _, q := range []model.QueueID{1, 2} {
			if _, _, end, err := e.Offsets(q); err == nil && end > 3 {
				_ = e.SetStartOffset(q, end-3)
			}
		}
		if err := compactByFirstByte(ctx, e, 5); err != nil {
			fmt.Fprintln(os.Stderr, "child compaction:", err)
			os.Exit(9)
		}
		if _, err := e.GC(ctx, 0.9); err != nil {
			fmt.Fprintln(os.Stderr, "child gc:", err)
			os.Exit(7)
		}
		if _, err := e.EnforceRetention(); err != nil {
			fmt.Fprintln(os.Stderr, "child retention:", err)
			os.Exit(8)
		}
	}
}

// gcHash is what the acks record of a payload: its hash, prefixed on the
// compacted queue with its key.
func gcHash(q model.QueueID, p []byte) string {
	if q == 5 {
		return fmt.Sprintf("%02x%s", p[0], hashOf(p))
	}
	return hashOf(p)
}

// compactByFirstByte compacts queue q as a compacted topic keyed by each
// payload's first byte: every superseded record becomes a hole, and every
// other kept record is rewritten (same bytes, a compacted copy).
func compactByFirstByte(ctx context.Context, e *storage.Engine, q model.QueueID) error {
	start, hw, _, err := e.Offsets(q)
	if err != nil || hw-start < 2 {
		return err
	}
	latest := map[byte]model.QueueOffset{}
	type rec struct {
		off     model.QueueOffset
		pos     model.LogPos
		key     byte
		payload []byte
	}
	var recs []rec
	for off := start; off < hw; {
		res, err := e.Read(q, off, storage.ReadOptions{MaxBytes: 1 << 20})
		if err != nil {
			return err
		}
		for _, r := range res.Records {
			if r.BaseOffset >= hw {
				break
			}
			latest[r.Payload[0]] = r.BaseOffset
			recs = append(recs, rec{r.BaseOffset, r.Pos, r.Payload[0], append([]byte(nil), r.Payload...)})
		}
		next := res.NextOffset
		res.Release()
		if next <= off {
			break
		}
		off = next
	}
	var rws []storage.Rewrite
	for i, r := range recs {
		switch {
		case latest[r.key] != r.off:
			rws = append(rws, storage.Rewrite{Base: r.off})
		case i%2 == 0:
			rws = append(rws, storage.Rewrite{Base: r.off, Record: &storage.Record{Count: 1, Payload: r.payload}})
		}
	}
	_, err = e.RewriteRecords(ctx, q, rws)
	return err
}

// TestGCCrashRecovery SIGKILLs the child at random moments, often in the
// middle of relocation or reclamation, and checks after every restart:
// every acknowledged record of the kept queues reads back byte-identical
// at its offset; every queue reads from its start to its end with each
// record intact (densely, but for compaction's holes: nothing deleted
// comes back as garbage, no entry points into a deleted segment); the
// compacted queue keeps every key's latest acknowledged record; and the
// log stays about the size of what is live.
func TestGCCrashRecovery(t *testing.T) {
	if os.Getenv(gcCrashChildEnv) != "" {
		t.Skip("child")
	}
	holes := map[model.QueueOffset]bool{} // compacted away in an earlier round
	kills := 12
	if testing.Short() {
		kills = 4
	}
	dir := t.TempDir()
	killChildRepeatedly(t, "TestGCCrashChild", gcCrashChildEnv, dir, kills, 300*time.Millisecond, 700*time.Millisecond,
		func(round int) { verifyGCCrashDir(t, dir, round, holes) })
}

func verifyGCCrashDir(t *testing.T, dir string, round int, holes map[model.QueueOffset]bool) {
	t.Helper()
	acks := readAcks(t, filepath.Join(dir, "acks"))
	e, err := storage.Open(gcCrashConfig(dir))
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer e.Close()
	type span struct {
		start  model.QueueOffset
		hashes []string
	}
	stored := map[model.QueueID]*span{}
	for q := model.QueueID(1); q <= 5; q++ {
		start, _, _, err := e.Offsets(q)
		if errors.Is(err, model.ErrUnknownQueue) {
			continue // killed before the queues were created
		}
		sp := &span{start: start}
		stored[q] = sp
		for off := start; ; {
			res, err := e.Read(q, off, storage.ReadOptions{MaxBytes: 256 << 10})
			if err != nil {
				t.Fatalf("round %d: queue %d offset %d (start %d): %v", round, q, off, start, err)
			}
			for _, r := range res.Records {
				if q == 5 { // compacted: holes leave gaps
					for off < r.BaseOffset {
						sp.hashes = append(sp.hashes, "")
						off++
					}
				}
				if r.BaseOffset != off {
					t.Fatalf("round %d: queue %d: offset %d where %d was expected", round, q, r.BaseOffset, off)
				}
				sp.hashes = append(sp.hashes, gcHash(q, r.Payload))
				off++
			}
			n := len(res.Records)
			res.Release()
			if n == 0 {
				break
			}
		}
	}
	// What compaction removed stays removed across crashes.
	if sp := stored[5]; sp != nil {
		for off := range holes {
			if i := int(off - sp.start); off >= sp.start && i < len(sp.hashes) && sp.hashes[i] != "" {
				t.Fatalf("round %d: compacted-away offset %d of the compacted queue is back", round, off)
			}
		}
		for i, h := range sp.hashes {
			if h == "" {
				holes[sp.start+model.QueueOffset(i)] = true
			}
		}
	}
	// The compacted queue keeps, for every key, its latest acknowledged
	// record (or a later one of the key).
	latestAck := map[string]ack{}
	for _, a := range acks {
		if a.queue == 5 {
			latestAck[a.hash[:2]] = a
		}
	}
	if sp := stored[5]; sp != nil {
		for key, a := range latestAck {
			found := false
			for i := int(a.offset - sp.start); i >= 0 && i < len(sp.hashes) && !found; i++ {
				found = strings.HasPrefix(sp.hashes[i], key)
			}
			if !found {
				t.Fatalf("round %d: compacted queue lost key %s (latest acknowledged at %d)", round, key, a.offset)
			}
		}
	}
	checked := 0
	for _, a := range acks {
		sp := stored[a.queue]
		if sp == nil || a.offset < sp.start {
			if a.queue >= 3 {
				t.Fatalf("round %d: kept queue %d lost acknowledged offset %d", round, a.queue, a.offset)
			}
			continue // trimmed
		}
		i := int(a.offset - sp.start)
		if a.queue == 5 && i < len(sp.hashes) && sp.hashes[i] == "" {
			continue // compacted away
		}
		if i >= len(sp.hashes) {
			t.Fatalf("round %d: acknowledged queue %d offset %d lost (queue ends at %d)", round, a.queue, a.offset, int(sp.start)+len(sp.hashes))
		}
		if sp.hashes[i] != a.hash {
			t.Fatalf("round %d: queue %d offset %d differs from what was acknowledged", round, a.queue, a.offset)
		}
		checked++
	}
	var live int64
	for _, u := range e.Usage() {
		live += u.Live
	}
	t.Logf("round %d: %d acknowledged records checked; log %d bytes, %d live, %d segments", round, checked, e.LogStats().Bytes, live, e.LogStats().Segments)
}
