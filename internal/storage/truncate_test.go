package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
	"github.com/rosettamq/rosetta/internal/testutil"
)

// noteKeeper is a state keeper recording which records it has seen (as the
// idempotent-producer states do): queue, base offset, count and store time.
type noteKeeper struct {
	mu   sync.Mutex
	seen map[string]bool
}

func newNoteKeeper() *noteKeeper { return &noteKeeper{seen: map[string]bool{}} }

func (k *noteKeeper) Name() string { return "test.notes" }

func (k *noteKeeper) note(q model.QueueID, base model.QueueOffset, count uint32, at int64) {
	k.mu.Lock()
	k.seen[fmt.Sprintf("%d/%d+%d@%d", q, base, count, at)] = true
	k.mu.Unlock()
}

func (k *noteKeeper) Capture() ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := make([]string, 0, len(k.seen))
	for s := range k.seen {
		keys = append(keys, s)
	}
	slices.Sort(keys)
	return []byte(strings.Join(keys, "\n")), nil
}

func (k *noteKeeper) Restore(data []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen = map[string]bool{}
	for _, s := range strings.Split(string(data), "\n") {
		if s != "" {
			k.seen[s] = true
		}
	}
	return nil
}

func (k *noteKeeper) Replay(_ model.LogPos, r *ReplayedRecord) {
	k.note(r.Queue, r.BaseOffset, r.Count, r.StoreTime)
}

// openWithKeeper opens an engine in dir with c and a note keeper.
func openWithKeeper(t *testing.T, c Config, dir string) (*Engine, *noteKeeper) {
	t.Helper()
	k := newNoteKeeper()
	c.Dir, c.StateKeepers = dir, []StateKeeper{k}
	return openEngine(t, c), k
}

// engineDump is everything the engine derives from its log: queues with
// their starts, ends and epochs, every index entry, and the keeper's state.
func engineDump(t *testing.T, e *Engine, k *noteKeeper) string {
	t.Helper()
	var sb strings.Builder
	for _, id := range e.QueueIDs() {
		start, hw, end, err := e.Offsets(id)
		if err != nil {
			t.Fatal(err)
		}
		epochs, _ := e.Epochs(id)
		fmt.Fprintf(&sb, "queue %d start=%d hw=%d end=%d epochs=%v\n", id, start, hw, end, epochs)
		q, _ := e.queue(id)
		var ents []queueindex.Entry
		if first, _, err := q.idx.Lookup(start); err == nil {
			for no := first; ; no += 256 {
				n := len(ents)
				ents, err = q.idx.Entries(no, 256, ents)
				if err != nil || len(ents) == n {
					break
				}
			}
		}
		for _, en := range ents {
			fmt.Fprintf(&sb, "  %d+%d size=%d hole=%v pos=%d max=%d tag=%d\n", en.BaseOffset, en.Count, en.Size, en.Hole(), en.Pos, en.MaxTime, en.TagHash)
		}
	}
	b, _ := k.Capture()
	fmt.Fprintf(&sb, "keeper:\n%s\n", b)
	return sb.String()
}

// truncationWorkload fills an engine with every kind of record: data in
// several queues (with keys), a checkpoint, start moves, a compaction
// rewrite and hole, a garbage-collection pass, then a tail of data records
// and queue creations in random order.
func truncationWorkload(t *testing.T, e *Engine, k *noteKeeper, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	put := func(q model.QueueID, n int) {
		for range n {
			body := make([]byte, 200+rng.IntN(3000))
			binary.LittleEndian.PutUint64(body, rng.Uint64())
			r := &Record{Queue: q, Count: uint32(1 + rng.IntN(3)), Payload: body, TagHash: uint64(rng.IntN(4)),
				Keys: []Key{{Key: fmt.Appendf(nil, "k%d", rng.IntN(50))}}}
			if err := e.Append(ctx, []*Record{r}); err != nil {
				t.Fatal(err)
			}
			k.note(r.Queue, r.BaseOffset, r.Count, r.StoreTime)
		}
	}
	if err := e.CreateQueues(ctx, []model.QueueID{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		put(model.QueueID(1+i%3), 20)
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	put(1, 30)
	if err := e.SetStartOffset(1, 25); err != nil {
		t.Fatal(err)
	}
	// Compaction of queue 2: its first record becomes a hole, its second a
	// smaller version of itself.
	var firsts []StoredRecord
	res, err := e.Read(2, 0, ReadOptions{MaxRecords: 2})
	if err != nil || len(res.Records) < 2 {
		t.Fatalf("read queue 2: %v", err)
	}
	firsts = append(firsts, res.Records...)
	rw := []Rewrite{{Base: firsts[0].BaseOffset}, {Base: firsts[1].BaseOffset, Record: &Record{Count: firsts[1].Count, Payload: []byte("compacted")}}}
	res.Release()
	if _, err := e.RewriteRecords(ctx, 2, rw); err != nil {
		t.Fatal(err)
	}
	put(3, 40)
	if err := e.SetStartOffset(3, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := e.GC(ctx, 0.9); err != nil {
		t.Fatal(err)
	}
	// The tail: data and queue creations only (nothing applied in place).
	for i := range 12 {
		if i%5 == 4 {
			if err := e.CreateQueue(ctx, model.QueueID(10+i)); err != nil {
				t.Fatal(err)
			}
			put(model.QueueID(10+i), 3)
			continue
		}
		put(model.QueueID(1+rng.IntN(3)), 1+rng.IntN(6))
	}
}

// TestTruncateAfterRandom cuts the log at random indexes after a mixed
// workload and checks that (1) the state after the cut equals that of a
// node rebuilt from the cut log alone, and (2) appending the cut records
// again restores the state before the cut exactly.
func TestTruncateAfterRandom(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	truncateRounds(t, seed, 12)
}

// FuzzTruncateAfter drives the same check from fuzzed seeds.
func FuzzTruncateAfter(f *testing.F) {
	f.Add(uint64(1))
	f.Add(uint64(0xdecaf))
	f.Fuzz(func(t *testing.T, seed uint64) { truncateRounds(t, seed, 4) })
}

func truncateRounds(t *testing.T, seed uint64, rounds int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	c := smallSegments(t)
	e, k := openWithKeeper(t, c, c.Dir)
	defer func() { e.Close() }()
	truncationWorkload(t, e, k, rng)
	if e.LogStats().LocalBytes == 0 {
		t.Fatal("the workload's garbage collection copied nothing")
	}
	for round := range rounds {
		last := e.clog.NextIndex() - 1
		lo := max(model.Index(e.appliedFloor.Load()), e.ckptIndex)
		if lo >= last {
			t.Fatalf("round %d: nothing may be cut (floor %d, last %d)", round, lo, last)
		}
		i := lo + model.Index(rng.IntN(int(last-lo)))
		want := engineDump(t, e, k)
		tail, err := e.clog.Entries(i+1, last+1, 1<<30)
		if err != nil || model.Index(len(tail)) != last-i {
			t.Fatalf("entries (%d, %d]: %d %v", i, last, len(tail), err)
		}
		if err := e.TruncateAfter(i); err != nil {
			t.Fatalf("truncate after %d: %v", i, err)
		}
		if got := e.clog.NextIndex(); got != i+1 {
			t.Fatalf("next index %d after truncating after %d", got, i)
		}
		cut := engineDump(t, e, k)
		// The same log, rebuilt from itself alone.
		img := t.TempDir()
		if out, err := exec.Command("cp", "-a", c.Dir+"/.", img).CombinedOutput(); err != nil {
			t.Fatalf("copy: %v %s", err, out)
		}
		re, rk := openWithKeeper(t, c, img)
		if rebuilt := engineDump(t, re, rk); rebuilt != cut {
			t.Fatalf("round %d: state after truncating after %d differs from the log's:\n%s", round, i, testutil.DiffLines(cut, rebuilt))
		}
		re.Close()
		// Apply the cut records again, in two calls.
		half := len(tail) / 2
		for _, part := range [][]commitlog.IndexedEntry{tail[:half], tail[half:]} {
			if err := e.AppendEntries(context.Background(), part); err != nil {
				t.Fatalf("round %d: append entries after %d: %v", round, i, err)
			}
		}
		if got := engineDump(t, e, k); got != want {
			t.Fatalf("round %d: state after re-applying the tail cut after %d differs:\n%s", round, i, testutil.DiffLines(want, got))
		}
	}
	// Below what was applied in place, truncation is refused.
	if floor := model.Index(e.appliedFloor.Load()); floor > 1 {
		if err := e.TruncateAfter(floor - 1); err == nil {
			t.Fatalf("truncation below the applied floor %d accepted", floor)
		}
	}
}

// TestRebuildFromLogsAfterGC: after garbage collection copied live records
// (data, compaction results, pinned control records) to the local area and
// their segments were reclaimed, a node rebuilt from the commit log and the
// local area alone — no checkpoint, no index files — has the same queues,
// starts, ends, epochs and index entries as the node itself.
func TestRebuildFromLogsAfterGC(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	c := smallSegments(t)
	e, k := openWithKeeper(t, c, c.Dir)
	defer func() { e.Close() }()
	truncationWorkload(t, e, k, rng)
	ctx := context.Background()
	for round := range 3 {
		if err := e.SetStartOffset(model.QueueID(1+round), model.QueueOffset(30+10*round)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.GC(ctx, 0.9); err != nil {
			t.Fatal(err)
		}
		if _, err := e.EnforceRetention(); err != nil {
			t.Fatal(err)
		}
	}
	if ls := e.LogStats(); ls.LocalBytes == 0 || e.clog.Start() == 0 && e.Stats().DeletedSegments.Load() == 0 {
		t.Fatalf("the workload deleted nothing: %+v", ls)
	}
	want := engineDump(t, e, k)
	img := t.TempDir()
	for _, d := range []string{"log", "local", "identity"} {
		if out, err := exec.Command("cp", "-a", c.Dir+"/"+d, img+"/").CombinedOutput(); err != nil {
			t.Fatalf("copy: %v %s", err, out)
		}
	}
	re, rk := openWithKeeper(t, c, img)
	defer re.Close()
	if got := engineDump(t, re, rk); got != want {
		t.Fatalf("rebuilt from the logs alone:\n%s", testutil.DiffLines(want, got))
	}
}
