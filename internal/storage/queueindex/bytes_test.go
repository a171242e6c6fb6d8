package queueindex

import (
	"fmt"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestSegmentBytes: live bytes follow entries added, flushed, dropped by a
// start move and by truncation, survive a reopen from the captured state,
// and a recount from the files agrees.
func TestSegmentBytes(t *testing.T) {
	s, err := NewStore(t.TempDir(), 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	segOf := func(pos model.LogPos) model.LogPos { return pos / 1000 * 1000 }
	s.SetSegmentOf(segOf)
	q := s.Open(3, State{}, nil)
	for i := 0; i < 50; i++ { // positions 0..4900, 10 entries of 100 bytes per segment
		pos := model.LogPos(i * 100)
		q.Assign(pos, segOf(pos), 100, 1, 0, 0)
		if i == 33 {
			if err := q.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(q *Queue, total int64, per string) {
		t.Helper()
		if q.TotalBytes() != total || fmt.Sprint(q.Bytes()) != per {
			t.Fatalf("total %d %v, want %d %s", q.TotalBytes(), q.Bytes(), total, per)
		}
	}
	want(q, 5000, "map[0:1000 1000:1000 2000:1000 3000:1000 4000:1000]")
	st, b := q.StateWithBytes()
	if b.Total() != 3400 {
		t.Fatalf("captured %d bytes for %d flushed entries", b.Total(), st.Flushed)
	}
	if err := q.SetStart(15); err != nil { // drops entries 0..14
		t.Fatal(err)
	}
	want(q, 3500, "map[1000:500 2000:1000 3000:1000 4000:1000]")
	if _, err := q.TruncateFromPos(4500); err != nil { // drops 45..49 (in the tail)
		t.Fatal(err)
	}
	want(q, 3000, "map[1000:500 2000:1000 3000:1000 4000:500]")
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	st, b = q.StateWithBytes()
	q2 := s.Open(3, st, b)
	want(q2, 3000, "map[1000:500 2000:1000 3000:1000 4000:500]")
	if err := q2.RebuildBytes(); err != nil {
		t.Fatal(err)
	}
	want(q2, 3000, "map[1000:500 2000:1000 3000:1000 4000:500]")
	if err := q2.Delete(); err != nil {
		t.Fatal(err)
	}
	want(q2, 0, "map[]")
}
