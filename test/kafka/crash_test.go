package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

const (
	crashDirEnv  = "ROSETTA_KAFKA_CRASH_DIR"
	crashAddrEnv = "ROSETTA_KAFKA_CRASH_ADDR" // optional fixed listener address
)

// TestKafkaCrashChild runs a node for TestKafkaCrash until it is killed.
func TestKafkaCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestKafkaCrash")
	}
	cfg := apptest.TestConfig(dir)
	cfg.Storage.Durability = "sync"
	cfg.Listen.HTTP = ""
	if addr := os.Getenv(crashAddrEnv); addr != "" {
		cfg.Listen.Kafka = addr
		// A slow disk: acknowledgements trail the written end, so a kill
		// finds batches written but not acknowledged.
		cfg.Hooks.AfterSync = func() { time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond) }
	}
	n := apptest.StartTestNode(t, cfg)
	fmt.Printf("KAFKA_ADDR=%s\n", n.KafkaAddr())
	select {} // until SIGKILL
}

func startCrashChild(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	return startCrashChildAt(t, dir, "")
}

// startCrashChildAt starts a child node on dir listening on addr (an
// ephemeral port when empty) and returns it with its Kafka address.
func startCrashChildAt(t *testing.T, dir, addr string) (*exec.Cmd, string) {
	t.Helper()
	return apptest.StartChild(t, "TestKafkaCrashChild", []string{crashDirEnv + "=" + dir, crashAddrEnv + "=" + addr}, "KAFKA_ADDR=")
}

type ackedRecord struct {
	partition int32
	offset    int64
	value     string
}

// TestKafkaCrash produces with acks=all to a node with sync durability,
// SIGKILLs it mid-stream, restarts it on the same data and checks that every
// acknowledged record is there at its offset.
func TestKafkaCrash(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	var acked []ackedRecord
	for round := 0; round < 5; round++ {
		cmd, addr := startCrashChild(t, dir)
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("crash"), kgo.AllowAutoTopicCreation(),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond), kgo.RecordRetries(3),
			kgo.RetryTimeout(2*time.Second), kgo.RecordDeliveryTimeout(3*time.Second),
			// Not idempotent: an idempotent producer never gives up on records
			// in flight to a broker that is gone for good.
			kgo.DisableIdempotentWrite())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					v := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					r := &kgo.Record{Value: []byte(v)}
					if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
						return
					}
					mu.Lock()
					acked = append(acked, ackedRecord{r.Partition, r.Offset, v})
					mu.Unlock()
				}
			}(w)
		}
		time.Sleep(time.Duration(300+round*150) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		cancel()
		wg.Wait()
		cl.Close()
	}
	// Restart and verify.
	cmd, addr := startCrashChild(t, dir)
	defer func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }()
	c := newClient(t, addr, kgo.ConsumeTopics("crash"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	want := map[[2]int64]string{}
	for _, a := range acked {
		want[[2]int64{int64(a.partition), a.offset}] = a.value
	}
	ctx := ctxTimeout(t, time.Minute)
	found := 0
	seen := map[[2]int64]bool{}
	for found < len(want) {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := c.PollFetches(fctx)
		cancel()
		if fs.NumRecords() == 0 && fctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := [2]int64{int64(r.Partition), r.Offset}
			if seen[k] {
				t.Fatalf("offset %v delivered twice", k)
			}
			seen[k] = true
			if v, ok := want[k]; ok {
				if v != string(r.Value) {
					t.Fatalf("partition %d offset %d holds %q, acknowledged %q", r.Partition, r.Offset, r.Value, v)
				}
				found++
			}
		})
	}
	if found != len(want) || len(want) == 0 {
		t.Fatalf("%d of %d acknowledged records found after crashes", found, len(want))
	}
	t.Logf("%d acknowledged records across 5 SIGKILLs, all intact", len(want))
}
