package commitlog

import (
	"errors"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestRaftSurface: entries by index across segments, terms that grow, the
// index range, the durable index, and truncation by index with appends
// going on from it.
func TestRaftSurface(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, 4096, SyncAlways, Recovery{}, nil)
	defer func() { l.Close() }()
	var want [][]byte
	appendTo := func(n int) {
		t.Helper()
		for range n {
			e := &Entry{Queue: 1, Count: 1, Payload: payload(len(want))}
			end, err := l.Append([]*Entry{e}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.WaitSynced(t.Context(), end); err != nil {
				t.Fatal(err)
			}
			want = append(want, e.Payload)
		}
	}
	appendTo(60) // several small segments
	if err := l.SetTerm(3); err != nil {
		t.Fatal(err)
	}
	if err := l.SetTerm(2); err == nil {
		t.Fatal("a term went backwards")
	}
	appendTo(40)
	if l.SegmentCount() < 3 {
		t.Fatalf("%d segments: the test wants several", l.SegmentCount())
	}
	if f, last := l.FirstIndex(), l.LastIndex(); f != 1 || last != 100 || l.SyncedIndex() != 100 {
		t.Fatalf("range [%d, %d], synced %d", f, last, l.SyncedIndex())
	}
	for _, i := range []model.Index{1, 60, 61, 100} {
		term, err := l.Term(i)
		wantTerm := model.Term(1)
		if i > 60 {
			wantTerm = 3
		}
		if err != nil || term != wantTerm {
			t.Fatalf("term(%d) = %d %v, want %d", i, term, err, wantTerm)
		}
	}
	// Read everything back in pages, as a follower catching up would.
	next := model.Index(1)
	for next <= 100 {
		es, err := l.Entries(next, 101, 500)
		if err != nil || len(es) == 0 {
			t.Fatalf("entries from %d: %d %v", next, len(es), err)
		}
		for _, e := range es {
			r, err := Decode(e.Data)
			if err != nil || e.Index != next || r.Index != next || string(r.Payload) != string(want[next-1]) {
				t.Fatalf("entry %d: %+v %v", next, r.Header, err)
			}
			next++
		}
	}
	if _, err := l.Entries(101, 102, 1); !errors.Is(err, model.ErrOffsetOutOfRange) {
		t.Fatalf("entries past the end: %v", err)
	}
	// Truncate a divergent tail and write a new one in a later term.
	if err := l.TruncateAfter(70); err != nil {
		t.Fatal(err)
	}
	if last := l.LastIndex(); last != 70 {
		t.Fatalf("last index after truncation %d", last)
	}
	want = want[:70]
	if err := l.SetTerm(4); err != nil {
		t.Fatal(err)
	}
	appendTo(5)
	if term, _ := l.Term(71); term != 4 {
		t.Fatalf("term of the new tail %d", term)
	}
	l.Close()
	l = openTest(t, dir, 4096, SyncAlways, Recovery{}, nil)
	if last := l.LastIndex(); last != 75 {
		t.Fatalf("last index after reopen %d", last)
	}
	es, err := l.Entries(66, 76, 1<<20)
	if err != nil || len(es) != 10 || es[9].Term != 4 || es[4].Term != 3 {
		t.Fatalf("entries around the truncation: %d %v", len(es), err)
	}
}
