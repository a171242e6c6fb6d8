package keyindex

import (
	"fmt"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

func TestAddLookupRollReopen(t *testing.T) {
	dir := t.TempDir()
	ix, err := Open(dir, 16, 50)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 120; i++ {
		if err := ix.Add(Hash([]byte(fmt.Sprint("k", i%40))), 1, model.QueueOffset(i), int64(i), model.LogPos(i*10)); err != nil {
			t.Fatal(err)
		}
	}
	if ix.Files() != 3 {
		t.Fatalf("%d files", ix.Files())
	}
	hits := ix.Lookup(Hash([]byte("k5")), 10, 0, 0)
	if len(hits) != 3 || hits[0].Offset != 85 || hits[2].Offset != 5 {
		t.Fatalf("hits %+v", hits)
	}
	if h := ix.Lookup(Hash([]byte("k5")), 10, 50, 90); len(h) != 1 || h[0].Offset != 85 {
		t.Fatalf("time-bounded hits %+v", h)
	}
	ix.Close()
	ix, err = Open(dir, 16, 50)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if hits := ix.Lookup(Hash([]byte("k5")), 10, 0, 0); len(hits) != 3 {
		t.Fatalf("after reopen %+v", hits)
	}
	if n := ix.DeleteBefore(600); n != 1 {
		t.Fatalf("deleted %d", n)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	b := make([]byte, entrySize)
	Entry{Hash: 1, Queue: 2, Prev: 3, Offset: 4, StoreTime: 5}.encode(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := DecodeEntry(in)
		if err != nil {
			return
		}
		out := make([]byte, entrySize)
		e.encode(out)
		if string(out) != string(in[:entrySize]) {
			t.Fatal("round trip differs")
		}
	})
}
