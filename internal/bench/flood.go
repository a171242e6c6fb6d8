package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// FloodOptions configure the flood: what an attacker (or a broken client)
// does to every listener of a node, while a real client keeps producing.
type FloodOptions struct {
	Kafka, Remoting, GRPC, HTTP string // listener addresses
	BrokerPID                   int
	Idle                        int // idle connections held
	Slow                        int // connections trickling a request a byte a second
	Huge                        int // connections announcing 64 MiB frames
	ExtFrames                   int // remoting frames with huge ext fields
	Malformed                   int // connections sending garbage, per listener
	Hold                        time.Duration
	After                       time.Duration // RSS watched this long after the flood ends
}

// FloodResult is the broker's resident memory (bytes) before the flood,
// at its peak and o.After after it closed.
type FloodResult struct {
	Start, Peak, After int64
}

// Flood runs the floods together, holds them, closes them, and reports the
// broker's RSS (start, peak, after) and a real Kafka producer's latency
// throughout.
func Flood(ctx context.Context, o FloodOptions, out io.Writer) (FloodResult, error) {
	if o.BrokerPID <= 0 {
		return FloodResult{}, fmt.Errorf("--broker-pid is required")
	}
	start := procRSS(o.BrokerPID)
	var peakMu sync.Mutex
	peak := start
	stopWatch := make(chan struct{})
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopWatch:
				return
			case <-t.C:
				r := procRSS(o.BrokerPID)
				peakMu.Lock()
				peak = max(peak, r)
				peakMu.Unlock()
			}
		}
	}()
	// A real client producing once a second throughout.
	probe, err := kgo.NewClient(kgo.SeedBrokers(o.Kafka), kgo.DefaultProduceTopic("flood-probe"), kgo.AllowAutoTopicCreation())
	if err != nil {
		return FloodResult{}, err
	}
	defer probe.Close()
	var probeMu sync.Mutex
	var probeLats []time.Duration
	probeFails := 0
	pctx, stopProbe := context.WithCancel(ctx)
	var probeWG sync.WaitGroup
	probeWG.Add(1)
	go func() {
		defer probeWG.Done()
		for pctx.Err() == nil {
			t0 := time.Now()
			c, cancel := context.WithTimeout(pctx, 5*time.Second)
			err := probe.ProduceSync(c, &kgo.Record{Value: []byte("probe")}).FirstErr()
			cancel()
			probeMu.Lock()
			if err != nil && pctx.Err() == nil {
				probeFails++
			} else if err == nil {
				probeLats = append(probeLats, time.Since(t0))
			}
			probeMu.Unlock()
			select {
			case <-pctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()

	var mu sync.Mutex
	var conns []net.Conn
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	dial := func(addr string) net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil
		}
		return c
	}
	listeners := []string{o.Kafka, o.Remoting, o.GRPC, o.HTTP}
	var wg sync.WaitGroup
	fctx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	// Garbage on every port, connection after connection.
	for _, addr := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			junk := make([]byte, 4096)
			for i := 0; i < o.Malformed && fctx.Err() == nil; i++ {
				if c := dial(addr); c != nil {
					_, _ = rand.Read(junk)
					_ = c.SetWriteDeadline(time.Now().Add(time.Second))
					_, _ = c.Write(junk)
					c.Close()
				}
			}
		}()
	}
	// Idle connections, spread over the listeners.
	for i := 0; i < o.Idle; i++ {
		if c := dial(listeners[i%len(listeners)]); c != nil {
			keep(c)
		}
	}
	// Slow senders: a request's first bytes, then a byte a second.
	for i := 0; i < o.Slow; i++ {
		addr := listeners[i%2] // Kafka and remoting frames
		c := dial(addr)
		if c == nil {
			continue
		}
		keep(c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Write([]byte{0, 0, 4, 0})
			for fctx.Err() == nil {
				if _, err := c.Write([]byte{0}); err != nil {
					return
				}
				select {
				case <-fctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	// Connections announcing 64 MiB frames, sending a little of them.
	for i := 0; i < o.Huge; i++ {
		c := dial(listeners[i%2])
		if c == nil {
			continue
		}
		keep(c)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], 64<<20)
		_, _ = c.Write(hdr[:])
		_, _ = c.Write(make([]byte, 64<<10))
	}
	// Remoting frames whose headers are huge ext fields.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ext protocol.Fields
		for i := 0; i < 100; i++ {
			ext = append(ext, protocol.Field{Key: fmt.Sprintf("k%03d", i), Value: strings.Repeat("v", 2000)})
		}
		frame := protocol.AppendFrame(nil, &protocol.Command{Code: protocol.SendMessageV2, Language: "GO", ExtFields: ext})
		sent := 0
		for sent < o.ExtFrames && fctx.Err() == nil {
			c := dial(o.Remoting)
			if c == nil {
				continue
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			for j := 0; j < 50 && sent < o.ExtFrames; j++ {
				if _, err := c.Write(frame); err != nil {
					break
				}
				sent++
			}
			c.Close()
		}
	}()
	fmt.Fprintf(out, "flood: %d idle, %d slow, %d announcing 64 MiB, %d huge-header remoting frames, %d garbage connections per listener\n",
		o.Idle, o.Slow, o.Huge, o.ExtFrames, o.Malformed)
	select {
	case <-ctx.Done():
	case <-time.After(o.Hold):
	}
	stopFlood()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	held := len(conns)
	mu.Unlock()
	wg.Wait()
	peakMu.Lock()
	during := peak
	peakMu.Unlock()
	ended := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(o.After):
	}
	after := procRSS(o.BrokerPID)
	stopProbe()
	probeWG.Wait()
	close(stopWatch)
	watchWG.Wait()
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	fmt.Fprintf(out, "connections held %d\n", held)
	fmt.Fprintf(out, "broker rss     start %.1f MiB, peak %.1f MiB, %v after the flood %.1f MiB (limit: 2 x start + 64 = %.1f MiB)\n",
		mib(start), mib(during), time.Since(ended).Round(time.Second), mib(after), 2*mib(start)+64)
	probeMu.Lock()
	lats := append([]time.Duration(nil), probeLats...)
	fails := probeFails
	probeMu.Unlock()
	slices.Sort(lats)
	fmt.Fprintf(out, "probe produce  %d acknowledged, %d failed, p50 %v, max %v\n", len(lats), fails,
		percentile(lats, 0.5).Round(time.Microsecond), percentile(lats, 1).Round(time.Microsecond))
	return FloodResult{Start: start, Peak: during, After: after}, nil
}
