package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// freeLoopbackAddr returns a loopback address with a port nothing listens on,
// so a broker restarted on it keeps the address its clients know.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestKafkaIdempotentCrash runs four idempotent producers at full speed
// against a sync-durability node on eight partitions and SIGKILLs the node a
// dozen times at random moments, some right after it came back. Batches
// written but not acknowledged at a kill are retried after the restart; the
// rebuilt producer state must recognise every one of them. In the end every
// acknowledged record is stored exactly once, at its acknowledged offset,
// and no record of the run is stored twice.
func TestKafkaIdempotentCrash(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	const (
		kills      = 12
		producers  = 4
		partitions = 8
		topic      = "idem-crash"
	)
	dir := t.TempDir()
	addr := freeLoopbackAddr(t)
	var child atomicCmd
	child.start(t, dir, addr)
	defer child.kill()

	adm := kadm.NewClient(newClient(t, addr))
	ctx := ctxTimeout(t, 5*time.Minute)
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	type ack struct {
		partition int32
		offset    int64
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	var failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	clients := make([]*kgo.Client, producers)
	for p := range clients {
		// Producers come back at different speeds after a restart, so the
		// slow ones retry behind many records of the fast ones.
		backoff := time.Duration(50+p*250) * time.Millisecond
		clients[p] = newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.MaxBufferedRecords(4000), kgo.ProducerLinger(time.Millisecond),
			kgo.RetryBackoffFn(func(int) time.Duration { return backoff }))
		wg.Add(1)
		go func(p int, cl *kgo.Client) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := fmt.Sprintf("p%d-%d", p, i)
				cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
						return
					}
					mu.Lock()
					acked[v] = ack{r.Partition, r.Offset}
					mu.Unlock()
				})
			}
		}(p, clients[p])
	}

	for k := 0; k < kills; k++ {
		var wait time.Duration
		switch k % 3 {
		case 0:
			wait = time.Duration(rand.IntN(50)) * time.Millisecond // right after a restart
		default:
			wait = time.Duration(200+rand.IntN(1300)) * time.Millisecond
		}
		time.Sleep(wait)
		child.kill()
		child.start(t, dir, addr)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, cl := range clients {
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := cl.Flush(fctx); err != nil {
			t.Fatalf("flush after the last restart: %v", err)
		}
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged")
	}

	// Read the whole topic back.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	c := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(16<<20))
	stored := make(map[string]ack, total)
	for read := int64(0); read < total; {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		fs := c.PollFetches(fctx)
		cancel()
		if fs.NumRecords() == 0 && fctx.Err() != nil {
			t.Fatalf("read %d of %d stored records", read, total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			v := string(r.Value)
			if prev, ok := stored[v]; ok {
				t.Fatalf("record %s stored twice: partition %d offsets %d and %d", v, r.Partition, prev.offset, r.Offset)
			}
			stored[v] = ack{r.Partition, r.Offset}
		})
	}
	for v, a := range acked {
		s, ok := stored[v]
		if !ok {
			t.Fatalf("acknowledged record %s (partition %d offset %d) is missing", v, a.partition, a.offset)
		}
		if s != a {
			t.Fatalf("record %s acknowledged at partition %d offset %d, stored at partition %d offset %d",
				v, a.partition, a.offset, s.partition, s.offset)
		}
	}
	per := make([]int, producers)
	for v := range acked {
		var p, i int
		fmt.Sscanf(v, "p%d-%d", &p, &i)
		per[p]++
	}
	t.Logf("acknowledged per producer: %v", per)
	t.Logf("%d records acknowledged, %d stored, %d failed, across %d SIGKILLs: each stored once, at its acknowledged offset",
		len(acked), total, failed.Load(), kills)
}

// atomicCmd is the current child broker process.
type atomicCmd struct {
	mu  sync.Mutex
	cmd interface {
		Signal(os.Signal) error
		Wait() (*os.ProcessState, error)
	}
}

func (a *atomicCmd) start(t *testing.T, dir, addr string) {
	t.Helper()
	cmd, got := startCrashChildAt(t, dir, addr)
	if got != addr {
		t.Fatalf("child listens on %s, want %s", got, addr)
	}
	a.mu.Lock()
	a.cmd = cmd.Process
	a.mu.Unlock()
}

func (a *atomicCmd) kill() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		_ = a.cmd.Signal(syscall.SIGKILL)
		_, _ = a.cmd.Wait()
		a.cmd = nil
	}
}
