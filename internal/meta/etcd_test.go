package meta_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/meta/metatest"
)

// TestStoreContract runs the same checks on both stores: what callers may
// rely on whichever is underneath.
func TestStoreContract(t *testing.T) { metatest.Stores(t, storeContract) }

func storeContract(t *testing.T, s meta.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := s.Revision()
	events := s.Watch(ctx, "topics/")
	rev, err := s.Txn(ctx, []meta.Compare{{Key: "topics/a"}}, []meta.Op{{Key: "topics/a", Value: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	if rev <= start || s.Revision() < rev {
		t.Fatalf("revision %d after a write, %d before, store says %d", rev, start, s.Revision())
	}
	if _, err := s.Txn(ctx, []meta.Compare{{Key: "topics/a"}}, []meta.Op{{Key: "topics/a", Value: []byte("2")}}); !errors.Is(err, meta.ErrConflict) {
		t.Fatalf("create over an existing key: %v", err)
	}
	if _, err := s.Txn(ctx, []meta.Compare{{Key: "topics/a", Revision: rev}}, []meta.Op{{Key: "topics/a", Value: []byte("2")}, {Key: "other", Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1", "2"} {
		select {
		case ev := <-events:
			if ev.Key != "topics/a" || string(ev.Value) != want || ev.Deleted {
				t.Fatalf("event %+v, want topics/a=%s", ev, want)
			}
		case <-ctx.Done():
			t.Fatal("no event")
		}
	}
	kv, err := s.Get(ctx, "topics/a")
	if err != nil || string(kv.Value) != "2" || kv.CreateRevision != rev || kv.Version != 2 || kv.Revision <= rev {
		t.Fatalf("get %+v %v (created at %d)", kv, err, rev)
	}
	// A write fenced by the create revision, as an election's holder does.
	if _, err := s.Txn(ctx, []meta.Compare{{Key: "topics/a", Target: meta.CompareCreate, Revision: rev}}, []meta.Op{{Key: "topics/c", Value: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, []meta.Compare{{Key: "topics/a", Target: meta.CompareVersion, Revision: 1}}, nil); !errors.Is(err, meta.ErrConflict) {
		t.Fatalf("version compare: %v", err)
	}
	if err := meta.Put(ctx, s, "topics/b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	kvs, listed, err := s.ListRev(ctx, "topics/")
	if err != nil || len(kvs) != 3 || kvs[0].Key != "topics/a" || kvs[1].Key != "topics/b" || kvs[2].Key != "topics/c" {
		t.Fatalf("list %+v %v", kvs, err)
	}
	// Changes after a listing arrive to a watch from its revision, none lost.
	if err := meta.Delete(ctx, s, "topics/b"); err != nil {
		t.Fatal(err)
	}
	from := s.WatchFrom(ctx, "topics/", listed)
	if err := meta.Put(ctx, s, "topics/d", []byte("d")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-topics/b", "topics/d"} {
		select {
		case ev := <-from:
			got := ev.Key
			if ev.Deleted {
				got = "-" + got
			}
			if got != want || ev.Compacted {
				t.Fatalf("watch from %d: %+v, want %s", listed, ev, want)
			}
		case <-ctx.Done():
			t.Fatal("no event")
		}
	}
	if _, err := s.Get(ctx, "topics/b"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("deleted key: %v", err)
	}

	// Leases: keys go with a revoked or expired lease.
	if _, err := s.Txn(ctx, nil, []meta.Op{{Key: "nodes/9", Value: []byte("?"), Lease: 999}}); !errors.Is(err, meta.ErrNoLease) {
		t.Fatalf("unknown lease: %v", err)
	}
	id, err := s.Grant(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, nil, []meta.Op{{Key: "nodes/1", Value: []byte("n1"), Lease: id}, {Key: "nodes/2", Value: []byte("n2"), Lease: id}}); err != nil {
		t.Fatal(err)
	}
	if kv, err := s.Get(ctx, "nodes/1"); err != nil || kv.Lease != id {
		t.Fatalf("leased key %+v %v", kv, err)
	}
	if err := s.KeepAlive(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	if kvs, _ := s.List(ctx, "nodes/"); len(kvs) != 0 {
		t.Fatalf("keys of a revoked lease: %+v", kvs)
	}
	if err := s.KeepAlive(ctx, id); !errors.Is(err, meta.ErrNoLease) {
		t.Fatalf("keep-alive of a revoked lease: %v", err)
	}
	short, err := s.Grant(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, nil, []meta.Op{{Key: "nodes/3", Value: []byte("n3"), Lease: short}}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Get(ctx, "nodes/3"); errors.Is(err, meta.ErrNotFound) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the key of an expired lease stays")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestEtcdCompactedWatch: a watch from a revision etcd no longer keeps gets
// one Compacted event, then its channel closes.
func TestEtcdCompactedWatch(t *testing.T) {
	m := metatest.StartMembers(t, "127.0.0.1")
	s := metatest.Open(t, "/rosetta/test/", m[0].Endpoint())
	ctx := context.Background()
	var revs []int64
	for i := range 3 {
		rev, err := s.Txn(ctx, nil, []meta.Op{{Key: fmt.Sprint("k/", i), Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, rev)
	}
	if err := s.Compact(ctx, revs[2]); err != nil {
		t.Fatal(err)
	}
	ch := s.WatchFrom(ctx, "k/", revs[0])
	if ev, ok := <-ch; !ok || !ev.Compacted {
		t.Fatalf("watch from a compacted revision: %+v %v", ev, ok)
	}
	if _, ok := <-ch; ok {
		t.Fatal("the channel stays open after Compacted")
	}
}

// TestEmbeddedThreeMembers: three members on their own loopback addresses
// form one store; a write through one is read and watched through the
// others, and two keep serving when the third stops.
func TestEmbeddedThreeMembers(t *testing.T) {
	hosts := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	for _, h := range hosts {
		l, err := net.Listen("tcp", h+":0")
		if err != nil {
			t.Skipf("loopback address %s: %v", h, err)
		}
		l.Close()
	}
	m := metatest.StartMembers(t, hosts...)
	s1 := metatest.Open(t, "/rosetta/c1/", m[0].Endpoint())
	s2 := metatest.Open(t, "/rosetta/c1/", m[1].Endpoint())
	s3 := metatest.Open(t, "/rosetta/c1/", m[2].Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := s3.Watch(ctx, "topics/")
	rev, err := s1.Txn(ctx, []meta.Compare{{Key: "topics/x"}}, []meta.Op{{Key: "topics/x", Value: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := s2.Get(ctx, "topics/x"); err != nil || string(kv.Value) != "1" || kv.Revision != rev {
		t.Fatalf("read through another member: %+v %v", kv, err)
	}
	if ev := <-events; ev.Key != "topics/x" || ev.Revision != rev {
		t.Fatalf("watched through a third: %+v", ev)
	}
	if _, err := s2.Txn(ctx, []meta.Compare{{Key: "topics/x"}}, []meta.Op{{Key: "topics/x", Value: []byte("2")}}); !errors.Is(err, meta.ErrConflict) {
		t.Fatalf("a second create through another member: %v", err)
	}
	// Another cluster's prefix sees none of it.
	other := metatest.Open(t, "/rosetta/c2/", m[0].Endpoint())
	if kvs, err := other.List(ctx, ""); err != nil || len(kvs) != 0 {
		t.Fatalf("another prefix lists %+v %v", kvs, err)
	}
	m[2].Close()
	if err := meta.Put(ctx, s1, "topics/y", []byte("y")); err != nil {
		t.Fatalf("write with two of three members: %v", err)
	}
	if kv, err := s2.Get(ctx, "topics/y"); err != nil || string(kv.Value) != "y" {
		t.Fatalf("read with two of three members: %+v %v", kv, err)
	}
}

// TestExternalEtcd runs the store contract against Debian's etcd-server (an
// etcd of another version than the client, as an operator's cluster may
// be), started as a child process.
func TestExternalEtcd(t *testing.T) {
	const bin = "/usr/bin/etcd"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("etcd-server not installed (scripts/test.sh installs it)")
		}
		t.Skip("etcd-server not installed")
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", metatest.FreePort(t, "127.0.0.1"))
	peer := fmt.Sprintf("http://127.0.0.1:%d", metatest.FreePort(t, "127.0.0.1"))
	cmd := exec.Command(bin, "--name", "ext", "--data-dir", t.TempDir(), "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "ext="+peer, "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var s *meta.EtcdStore
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if s, err = meta.OpenEtcd(context.Background(), meta.EtcdConfig{Endpoints: []string{client}, Prefix: "/rosetta/ext/", DialTimeout: time.Second}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("external etcd at %s: %v", client, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer s.Close()
	storeContract(t, s)
}
