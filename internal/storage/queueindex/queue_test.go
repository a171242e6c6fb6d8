package queueindex

import (
	"errors"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

func TestQueueFlushLookupAcrossFiles(t *testing.T) {
	s, err := NewStore(t.TempDir(), 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := s.Open(7, State{}, nil)
	for i := 0; i < 100; i++ {
		q.Assign(model.LogPos(i*100), model.LogPos(i*100/1000*1000), 100, 2, int64(i%10), 0) // timestamps not monotonic
		if i%13 == 0 {
			if err := q.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for off := model.QueueOffset(0); off < 200; off += 7 {
		no, e, err := q.Lookup(off)
		if err != nil || e.BaseOffset != off/2*2 || no != int64(off/2) {
			t.Fatalf("lookup %d: no %d %+v %v", off, no, e, err)
		}
	}
	if _, _, err := q.Lookup(200); !errors.Is(err, model.ErrOffsetOutOfRange) {
		t.Fatalf("lookup past end: %v", err)
	}
	// MaxTime is the running maximum, so time search is monotonic.
	if _, e, err := q.LookupTime(9); err != nil || e.BaseOffset != 18 {
		t.Fatalf("time lookup: %+v %v", e, err)
	}
	ents, err := q.Entries(5, 20, nil)
	if err != nil || len(ents) != 20 || ents[0].BaseOffset != 10 || ents[19].BaseOffset != 48 {
		t.Fatalf("entries: %v %+v", err, ents)
	}
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	st := q.State()
	q2 := s.Open(7, st, nil)
	if _, e, err := q2.Lookup(150); err != nil || e.Pos != 7500 {
		t.Fatalf("reopened lookup: %+v %v", e, err)
	}
	if err := q2.SetStart(100); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q2.Lookup(99); !errors.Is(err, model.ErrOffsetOutOfRange) {
		t.Fatal("lookup before start")
	}
	if n, err := q2.TruncateFromPos(9000); err != nil || n != 10 || q2.NextOffset() != 180 {
		t.Fatalf("truncate: %d %v next %d", n, err, q2.NextOffset())
	}
	if hw := q2.VisibleEnd(8000); hw != 160 {
		t.Fatalf("visible end %d", hw)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	var b [EntrySize]byte
	Entry{Pos: 4096, BaseOffset: 10, Size: 200, Count: 3, MaxTime: 1700000000000, TagHash: 99}.Encode(b[:])
	f.Add(b[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := DecodeEntry(in)
		if err != nil {
			return
		}
		var out [EntrySize]byte
		e.Encode(out[:])
		e2, err := DecodeEntry(out[:])
		if err != nil || e2 != e {
			t.Fatalf("round trip: %+v %+v %v", e, e2, err)
		}
		if string(out[:]) != string(in[:EntrySize]) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzCheckFileHeader(f *testing.F) {
	f.Add(encodeFileHeader(3), uint32(3))
	f.Fuzz(func(t *testing.T, b []byte, q uint32) {
		if checkFileHeader(b, model.QueueID(q)) == nil && string(b[:4]) != "RIDX" {
			t.Fatal("accepted bad magic")
		}
	})
}

// TestRepointDuringFlush moves entries of the unflushed tail while other
// goroutines flush it: no move may be lost between a flush's copy of the
// tail and its dropping the entries it wrote.
func TestRepointDuringFlush(t *testing.T) {
	s, err := NewStore(t.TempDir(), 1024, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := s.Open(3, State{}, nil)
	const n = 4000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			q.Assign(model.LogPos(i*100), 0, 100, 1, 0, 0)
			if i%7 == 0 {
				_ = q.Flush()
			}
		}
	}()
	moved := 0
	for moved < n {
		if q.NextOffset() <= model.QueueOffset(moved) {
			continue
		}
		ok, err := q.Repoint(model.QueueOffset(moved), model.LogPos(moved*100), model.LocalPosBase+model.LogPos(moved*100), model.LocalPosBase, 100, 1)
		if err != nil || !ok {
			t.Fatalf("repoint %d: %v %v", moved, ok, err)
		}
		moved++
	}
	<-done
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	for off := model.QueueOffset(0); off < n; off++ {
		if _, e, err := q.Lookup(off); err != nil || e.Pos != model.LocalPosBase+model.LogPos(off*100) {
			t.Fatalf("offset %d: %+v %v (move lost)", off, e, err)
		}
	}
}
