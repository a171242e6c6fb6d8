package meta

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestBoltStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	events := s.Watch(wctx, "topics/")
	rev, err := s.Txn(ctx, []Compare{{Key: "topics/a", Revision: 0}}, []Op{{Key: "topics/a", Value: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, []Compare{{Key: "topics/a", Revision: 0}}, []Op{{Key: "topics/a", Value: []byte("2")}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("expected conflict, got %v", err)
	}
	if _, err := s.Txn(ctx, []Compare{{Key: "topics/a", Revision: rev}}, []Op{{Key: "topics/a", Value: []byte("2")}, {Key: "other", Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Key != "topics/a" || string(ev.Value) != "1" {
		t.Fatalf("event %+v", ev)
	}
	if ev := <-events; string(ev.Value) != "2" {
		t.Fatalf("event %+v", ev)
	}
	cancel()
	if err := Put(ctx, s, "topics/b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	kvs, _ := s.List(ctx, "topics/")
	if len(kvs) != 2 {
		t.Fatalf("list %+v", kvs)
	}
	s.Close()
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kv, err := s.Get(ctx, "topics/a")
	if err != nil || string(kv.Value) != "2" || s.Revision() != 3 {
		t.Fatalf("after reopen %+v %v rev %d", kv, err, s.Revision())
	}
	if err := Delete(ctx, s, "topics/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "topics/a"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
}

// TestEtcdShape: create revisions and versions, compares on them (an
// election-style fence), list with a revision then watch from it without a
// gap, compaction, and leases whose keys go when they expire or are
// revoked, and at reopen.
func TestEtcdShape(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	created, err := s.Txn(ctx, []Compare{{Key: "ctl", Target: CompareCreate}}, []Op{{Key: "ctl", Value: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(ctx, s, "ctl", []byte("b")); err != nil {
		t.Fatal(err)
	}
	kv, _ := s.Get(ctx, "ctl")
	if kv.CreateRevision != created || kv.Version != 2 || kv.Revision == created {
		t.Fatalf("revisions %+v (created at %d)", kv, created)
	}
	// A write fenced by the create revision holds while the key lives.
	if _, err := s.Txn(ctx, []Compare{{Key: "ctl", Target: CompareCreate, Revision: created}}, []Op{{Key: "x", Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, []Compare{{Key: "ctl", Target: CompareVersion, Revision: 1}}, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("version compare: %v", err)
	}

	// List, change, then watch from the listing's revision: nothing missed.
	_, rev, err := s.ListRev(ctx, "w/")
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(ctx, s, "w/1", []byte("1")); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	events := s.WatchFrom(wctx, "w/", rev)
	if err := Put(ctx, s, "w/2", []byte("2")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"w/1", "w/2"} {
		if ev := <-events; ev.Key != want || ev.Compacted {
			t.Fatalf("watch from %d: %+v, want %s", rev, ev, want)
		}
	}
	cancel()

	// Leases.
	id, err := s.Grant(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, nil, []Op{{Key: "nodes/1", Value: []byte("n1"), Lease: id}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, nil, []Op{{Key: "nodes/9", Value: []byte("?"), Lease: 999}}); !errors.Is(err, ErrNoLease) {
		t.Fatalf("unknown lease: %v", err)
	}
	if err := s.KeepAlive(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.expireLeases(time.Now()) // not yet due
	if _, err := s.Get(ctx, "nodes/1"); err != nil {
		t.Fatalf("key of a live lease: %v", err)
	}
	s.expireLeases(time.Now().Add(2 * time.Second))
	if _, err := s.Get(ctx, "nodes/1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("key of an expired lease: %v", err)
	}
	if err := s.KeepAlive(ctx, id); !errors.Is(err, ErrNoLease) {
		t.Fatalf("keep-alive of an expired lease: %v", err)
	}
	id2, _ := s.Grant(ctx, time.Hour)
	if _, err := s.Txn(ctx, nil, []Op{{Key: "nodes/2", Value: []byte("n2"), Lease: id2}, {Key: "nodes/3", Value: []byte("n3"), Lease: id2}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if kvs, _ := s.List(ctx, "nodes/"); len(kvs) != 0 {
		t.Fatalf("keys of a revoked lease: %+v", kvs)
	}
	id3, _ := s.Grant(ctx, time.Hour)
	if _, err := s.Txn(ctx, nil, []Op{{Key: "nodes/4", Value: []byte("n4"), Lease: id3}}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Leases end with the process; history too (watching from before the
	// reopen is compacted).
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(ctx, "nodes/4"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("key of a lease from before the reopen: %v", err)
	}
	if ev, ok := <-s.WatchFrom(ctx, "w/", rev); !ok || !ev.Compacted {
		t.Fatalf("watch from before the reopen: %+v %v", ev, ok)
	}
	if kv, _ := s.Get(ctx, "ctl"); kv.CreateRevision != created || kv.Version != 2 {
		t.Fatalf("revisions after reopen %+v", kv)
	}
}

func FuzzDecodeValue(f *testing.F) {
	f.Add(encodeValue(KV{Key: "k", Value: []byte("v"), Revision: 3, CreateRevision: 2, Version: 2, Lease: 7}))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 5, 'o', 'l', 'd'})
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, err := decodeValue("k", b)
		if err != nil {
			return
		}
		again, err := decodeValue("k", encodeValue(kv))
		if err != nil || again.Revision != kv.Revision || again.CreateRevision != kv.CreateRevision ||
			again.Version != kv.Version || again.Lease != kv.Lease || string(again.Value) != string(kv.Value) {
			t.Fatalf("unstable: %+v %+v %v", kv, again, err)
		}
	})
}
