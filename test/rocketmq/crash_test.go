package rocketmq_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

const (
	crashDirEnv  = "ROSETTA_RMQ_CRASH_DIR"
	crashAddrEnv = "ROSETTA_RMQ_CRASH_ADDR"
)

// TestRemotingCrashChild runs a node for TestRemotingCrash until killed.
func TestRemotingCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestRemotingCrash")
	}
	cfg := apptest.TestConfig(dir)
	cfg.Storage.Durability = "sync"
	cfg.Listen.HTTP = ""
	cfg.Listen.Remoting = os.Getenv(crashAddrEnv)
	n := apptest.StartTestNode(t, cfg)
	fmt.Printf("ADDRS=%s,%s\n", n.RemotingAddr(), n.KafkaAddr())
	select {}
}

func startRemotingChild(t *testing.T, dir, addr string) (*exec.Cmd, string) {
	t.Helper()
	cmd, addrs := apptest.StartChild(t, "TestRemotingCrashChild", []string{crashDirEnv + "=" + dir, crashAddrEnv + "=" + addr}, "ADDRS=")
	_, kafka, _ := strings.Cut(addrs, ",")
	return cmd, kafka
}

// TestRemotingCrash: messages acknowledged to sync senders under sync
// durability survive SIGKILL of the broker and its restart, each at the
// queue and offset its send result named.
func TestRemotingCrash(t *testing.T) {
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
	type ack struct {
		queue  int
		offset int64
	}
	acked := map[string]ack{}
	var mu sync.Mutex
	var kafkaAddr string
	for round := 0; round < 4; round++ {
		cmd, ka := startRemotingChild(t, dir, addr)
		kafkaAddr = ka
		p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})),
			producer.WithGroupName("crash-pg"), producer.WithInstanceName(fmt.Sprint("crash-", round)),
			producer.WithRetry(0), producer.WithSendMsgTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					body := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					res, err := p.SendSync(ctx, primitive.NewMessage("crashed", []byte(body)))
					if err != nil || res.Status != primitive.SendOK {
						if ctx.Err() != nil {
							return
						}
						continue
					}
					mu.Lock()
					acked[body] = ack{res.MessageQueue.QueueId, res.QueueOffset}
					mu.Unlock()
				}
			}(w)
		}
		time.Sleep(time.Duration(400+round*200) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		cancel()
		wg.Wait()
		_ = p.Shutdown()
	}
	cmd, ka := startRemotingChild(t, dir, addr)
	kafkaAddr = ka
	defer func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }()
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged")
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics("crashed"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	stored := map[ack]string{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for found := 0; found < len(acked); {
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		fs := kc.PollFetches(fctx)
		fcancel()
		if fs.NumRecords() == 0 && fctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			stored[ack{int(r.Partition), r.Offset}] = string(r.Value)
			found++
		})
	}
	for body, a := range acked {
		if stored[a] != body {
			t.Fatalf("acknowledged %s at queue %d offset %d, stored %q", body, a.queue, a.offset, stored[a])
		}
	}
	t.Logf("%d messages acknowledged across 4 SIGKILLs, all at their acknowledged place", len(acked))
}
