// Package metatest starts etcd members for tests of code over meta.Store.
package metatest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/meta/etcdembed"
)

// FreePort returns a port free on host now.
func FreePort(t testing.TB, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartMembers starts one embedded etcd member per host as one cluster and
// returns them (closed when the test ends).
func StartMembers(t testing.TB, hosts ...string) []*etcdembed.Embedded {
	t.Helper()
	peers := map[string]string{}
	clients := map[string]string{}
	for i, h := range hosts {
		name := fmt.Sprint("m", i+1)
		peers[name] = fmt.Sprintf("http://%s:%d", h, FreePort(t, h))
		clients[name] = fmt.Sprintf("http://%s:%d", h, FreePort(t, h))
	}
	dir := t.TempDir()
	out := make([]*etcdembed.Embedded, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i := range hosts {
		name := fmt.Sprint("m", i+1)
		wg.Go(func() {
			out[i], errs[i] = etcdembed.StartEmbedded(context.Background(), etcdembed.EmbeddedConfig{Name: name, Dir: filepath.Join(dir, name),
				ClientURL: clients[name], PeerURL: peers[name], InitialCluster: peers, ClusterToken: "test", StartTimeout: 30 * time.Second})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(out[i].Close)
	}
	return out
}

// Open opens a store on etcd under prefix, closed when the test ends.
func Open(t testing.TB, prefix string, endpoints ...string) *meta.EtcdStore {
	t.Helper()
	s, err := meta.OpenEtcd(context.Background(), meta.EtcdConfig{Endpoints: endpoints, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Stores runs fn on a fresh embedded store and on a fresh single-member
// etcd store, as subtests "bolt" and "etcd".
func Stores(t *testing.T, fn func(t *testing.T, s meta.Store)) {
	t.Run("bolt", func(t *testing.T) {
		s, err := meta.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("etcd", func(t *testing.T) {
		m := StartMembers(t, "127.0.0.1")
		fn(t, Open(t, "/rosetta/test/", m[0].Endpoint()))
	})
}
