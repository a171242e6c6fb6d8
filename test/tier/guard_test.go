package tier_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// dirBytes is what a directory holds on disk.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}

// TestTierStoreOutageAtDiskGuard: with the object store killed, sealed
// segments stay on local disk until the disk guard (a 24 MiB disk, 4 MiB
// kept free) refuses produce with KAFKA_STORAGE_ERROR at once; local disk
// stays within the disk; once the store is back the uploads catch up, the
// tiered segments leave local disk, produce is accepted again, and every
// acknowledged record reads back.
func TestTierStoreOutageAtDiskGuard(t *testing.T) {
	gw := apptest.StartVersityGW(t, "tier")
	c := apptest.TestConfig(t.TempDir())
	gw.Configure(&c, "tier", 2*time.Second)
	c.Storage.Tier.UploadInterval = 300 * time.Millisecond
	const disk = 24 << 20
	storageDir := filepath.Join(c.DataDir, "storage")
	c.Storage.MinFreeBytes = 4 << 20
	c.Storage.StatDisk = func() (int64, int64, error) { return disk, max(0, disk-dirBytes(storageDir)), nil }
	n := apptest.StartTestNode(t, c)
	const topic, partitions = "guard", 3
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic(topic+"-probe"), kgo.DisableIdempotentWrite(),
		kgo.RecordRetries(0), kgo.RequestRetries(0), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic+"-probe"); err != nil {
		t.Fatal(err)
	}
	p := startProducing(t, n.KafkaAddr(), topic, partitions)
	apptest.Eventually(t, time.Minute, "segments tiered", func() bool { s, _ := apptest.TierSegments(t, n); return s >= 2 })

	// probe produces one record without retries: the answer and its wait.
	probe := func() (error, time.Duration) {
		sent := time.Now()
		err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("probe")}).FirstErr()
		return err, time.Since(sent)
	}
	gw.Kill()
	killed := time.Now()
	var peak int64
	// Tiered segments still local make room first; then every produce is
	// refused, each at once.
	refused := 0
	apptest.Eventually(t, 2*time.Minute, "produce refused at the disk guard", func() bool {
		peak = max(peak, dirBytes(storageDir))
		err, took := probe()
		if took > 5*time.Second {
			t.Fatalf("a produce at the disk guard waited %v", took)
		}
		if err != nil && !errors.Is(err, kerr.KafkaStorageError) {
			t.Fatalf("produce refused with %v, want KAFKA_STORAGE_ERROR", err)
		}
		if err == nil {
			refused = 0
		} else {
			refused++
		}
		return refused == 10
	})
	t.Logf("produce refused at the disk guard %v after the store's SIGKILL", time.Since(killed).Round(time.Millisecond))
	if status, _ := tierHealth(t, n); status != "stalled" {
		t.Fatalf("tiering reported %q with the store down", status)
	}
	gw.Start()
	back := time.Now()
	accepted := 0
	apptest.Eventually(t, 2*time.Minute, "produce accepted once the uploads caught up", func() bool {
		peak = max(peak, dirBytes(storageDir))
		if err, _ := probe(); err != nil {
			accepted = 0
			return false
		}
		accepted++
		status, pending := tierHealth(t, n)
		return accepted >= 10 && status == "ok" && pending <= 3
	})
	t.Logf("produce accepted again %v after the store came back", time.Since(back).Round(time.Millisecond))
	if peak > disk+(1<<20) {
		t.Fatalf("local storage reached %d MiB on a %d MiB disk", peak>>20, disk>>20)
	}
	close(p.stop)
	<-p.done
	if p.errs > 0 {
		t.Fatalf("%d produce errors for the retrying producer", p.errs)
	}
	// Every acknowledged record, from the bucket and the local tail.
	cons, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	next := make([]int, partitions)
	for total, want := 0, p.total(); total < want; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d acknowledged records", total, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			part := int(r.Partition)
			if int(r.Offset) != next[part] || !bytes.Equal(r.Value, value(part, next[part])) {
				t.Fatalf("partition %d offset %d: want offset %d's value", part, r.Offset, next[part])
			}
			next[part]++
			total++
		})
	}
	t.Logf("%d records acknowledged; local storage peaked at %d MiB of a %d MiB disk", p.total(), peak>>20, disk>>20)
}
