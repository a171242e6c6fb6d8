package pulsar_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

const (
	crashDirEnv  = "ROSETTA_PULSAR_CRASH_DIR"
	crashAddrEnv = "ROSETTA_PULSAR_CRASH_ADDR"
)

// TestPulsarCrashChild runs a node for TestPulsarCrash until killed.
func TestPulsarCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestPulsarCrash")
	}
	cfg := apptest.TestConfig(dir)
	cfg.Storage.Durability = "sync"
	cfg.Listen.HTTP, cfg.Listen.Remoting, cfg.Listen.GRPC = "", "", ""
	cfg.Listen.Pulsar = os.Getenv(crashAddrEnv)
	n := apptest.StartTestNode(t, cfg)
	fmt.Printf("ADDRS=%s\n", n.KafkaAddr())
	select {}
}

func startPulsarChild(t *testing.T, dir, addr string) (*exec.Cmd, string) {
	t.Helper()
	return apptest.StartChild(t, "TestPulsarCrashChild", []string{crashDirEnv + "=" + dir, crashAddrEnv + "=" + addr}, "ADDRS=")
}

// TestPulsarCrash: a batching producer keeps sending while the broker is
// SIGKILLed four times and restarted; it reconnects and sends again what was
// not acknowledged, and broker-side de-duplication stores every message
// exactly once — those stored before a kill but not acknowledged included.
func TestPulsarCrash(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd, kafkaAddr := startPulsarChild(t, dir, addr)
	defer func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }()

	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + addr, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 2 * time.Second, Logger: plog.NewLoggerWithSlog(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "crashed", SendTimeout: 2 * time.Minute,
		BatchingMaxPublishDelay: 5 * time.Millisecond, MaxPendingMessages: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const total = 6000
	pad := strings.Repeat("x", 4<<10) // fsyncs take a while: some batches are written, not yet acknowledged
	var mu sync.Mutex
	var failed []error
	acked := 0
	var wg sync.WaitGroup
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		for i := range total {
			wg.Add(1)
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("c%d-%s", i, pad))},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed = append(failed, err)
						return
					}
					acked++
				})
			if i%20 == 19 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	for range 4 {
		time.Sleep(150 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		cmd, kafkaAddr = startPulsarChild(t, dir, addr)
	}
	<-sendDone
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics("crashed"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stored := 0
	for len(seen) < total {
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		fs := kc.PollFetches(fctx)
		fcancel()
		if fs.NumRecords() == 0 && fctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			v, _, _ := strings.Cut(string(r.Value), "-")
			seen[v]++
			stored++
		})
	}
	var dups []string
	for v, k := range seen {
		if k > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", v, k))
		}
	}
	if len(seen) != total || len(dups) > 0 {
		t.Fatalf("%d of %d messages stored (%d records); duplicates: %s", len(seen), total, stored, strings.Join(dups, " "))
	}
	t.Logf("%d messages acknowledged across 4 SIGKILLs, each stored once", acked)
}
