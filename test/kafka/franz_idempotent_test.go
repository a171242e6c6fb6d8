package kafka_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// cuttingProxy forwards TCP to target and cuts every connection at random
// moments, so requests and responses are lost mid-flight.
type cuttingProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	done   chan struct{}
	cuts   atomic.Int64
}

func newCuttingProxy(t *testing.T, target string) *cuttingProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{l: l, target: target, done: make(chan struct{})}
	go p.accept()
	go p.cutter()
	t.Cleanup(func() { close(p.done); l.Close(); p.cutAll() })
	return p
}

func (p *cuttingProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }()
		go p.forwardResponses(c, up)
	}
}

// forwardResponses copies broker responses to the client, but now and then
// drops a response and cuts the connection: the broker has done the work and
// the client never learns it, which is exactly when a retry duplicates.
func (p *cuttingProxy) forwardResponses(c, up net.Conn) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if rand.IntN(8) == 0 {
				p.cuts.Add(1)
				up.Close()
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cuttingProxy) cutAll() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

func (p *cuttingProxy) cutter() {
	for {
		select {
		case <-p.done:
			return
		case <-time.After(time.Duration(10+rand.IntN(60)) * time.Millisecond):
			p.cutAll()
			p.cuts.Add(1)
		}
	}
}

// TestFranzIdempotentProducerConnectionCuts produces through a proxy that
// keeps cutting connections; the idempotent producer retries, and the topic
// must hold every record exactly once, in order per partition.
func TestFranzIdempotentProducerConnectionCuts(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, 3*time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "idem"); err != nil {
		t.Fatal(err)
	}
	proxy := newCuttingProxy(t, n.KafkaAddr())
	p := newClient(t, proxy.l.Addr().String(), kgo.DefaultProduceTopic("idem"),
		kgo.RecordRetries(1000), kgo.RequestRetries(1000), kgo.ProducerLinger(time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const total = 20000
	var wg sync.WaitGroup
	errs := make(chan error, total)
	cutsBefore := proxy.cuts.Load()
	for i := 0; i < total; i++ {
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // spread the stream over many cuts
		}
		wg.Add(1)
		p.Produce(ctx, &kgo.Record{Partition: int32(i % 4), Key: []byte(strconv.Itoa(i)), Value: []byte("v")}, func(_ *kgo.Record, err error) {
			if err != nil {
				errs <- err
			}
			wg.Done()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("produce: %v", err)
	}
	if cuts := proxy.cuts.Load() - cutsBefore; cuts < 10 {
		t.Fatalf("only %d connection cuts happened while producing", cuts)
	} else {
		t.Logf("%d connection cuts while producing", cuts)
	}
	c := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("idem"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[int]bool{}
	last := map[int32]int{0: -1, 1: -1, 2: -1, 3: -1}
	for len(seen) < total {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := c.PollFetches(fctx)
		cancel()
		if fctx.Err() != nil && fs.NumRecords() == 0 {
			t.Fatalf("only %d of %d records stored", len(seen), total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			i, _ := strconv.Atoi(string(r.Key))
			if seen[i] {
				t.Fatalf("record %d stored twice", i)
			}
			if i <= last[r.Partition] {
				t.Fatalf("partition %d: record %d after %d", r.Partition, i, last[r.Partition])
			}
			last[r.Partition] = i
			seen[i] = true
		})
	}
	// Nothing beyond the expected records.
	end, err := adm.ListEndOffsets(ctx, "idem")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	end.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	if sum != total {
		t.Fatalf("topic holds %d records, want %d", sum, total)
	}
}
