package meta

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
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
