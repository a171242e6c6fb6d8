package broker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/storage"
)

// TestDynamicBrokerConfigsApplyEverywhere: a dynamic broker config set
// through one broker applies on another broker sharing the metadata store
// (as nodes of a cluster share etcd), and on a broker opened later.
func TestDynamicBrokerConfigsApplyEverywhere(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	openOn := func(sub string) *Broker {
		c := storage.DefaultConfig(filepath.Join(dir, sub))
		c.MinFreeBytes, c.MinFreeRatio = 0, 0
		e, err := storage.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		b, err := New(ctx, e, m, Options{Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b1, b2 := openOn("n1"), openOn("n2")
	if err := b1.SetBrokerConfigs(ctx, "", map[string]string{"log.retention.minutes": "5", "custom.key": "x"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other broker applies the cluster-wide retention", func() bool {
		ms, _ := b2.RetentionDefaults()
		return ms == (5 * time.Minute).Milliseconds()
	})
	if v, perNode, ok := b2.DynamicBrokerConfig(1, "custom.key"); !ok || perNode || v != "x" {
		t.Fatalf("custom key on the other broker: %q %v %v", v, perNode, ok)
	}
	// A node's own setting wins over the default; ms wins over minutes.
	if err := b1.SetBrokerConfigs(ctx, "1", map[string]string{"log.retention.ms": "2000", "log.retention.bytes": "4096"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node's own retention", func() bool {
		ms, bytes := b2.RetentionDefaults()
		return ms == 2000 && bytes == 4096
	})
	if b3 := openOn("n3"); b3.BrokerConfigs("1")["log.retention.ms"] != "2000" {
		t.Fatalf("a broker opened later: %v", b3.BrokerConfigs("1"))
	}
	if err := b1.SetBrokerConfigs(ctx, "1", nil); err != nil {
		t.Fatal(err)
	}
	if err := b1.SetBrokerConfigs(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the static retention back", func() bool {
		ms, bytes := b2.RetentionDefaults()
		return ms == time.Hour.Milliseconds() && bytes == -1
	})
}
