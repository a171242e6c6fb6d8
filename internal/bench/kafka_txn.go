package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaTxnOptions describe a transactional workload: producers each
// committing transactions of TxnSize records, or (Plain) the same records
// flushed per group of TxnSize without transactions, for comparison.
type KafkaTxnOptions struct {
	KafkaOptions
	Producers int
	Txns      int // transactions in all
	TxnSize   int
	Plain     bool
}

// KafkaTransactions runs the workload and reports transactions per second
// (latency: begin to committed, per transaction).
func KafkaTransactions(ctx context.Context, o KafkaTxnOptions) (*Report, error) {
	if err := o.ensureTopic(ctx); err != nil {
		return nil, err
	}
	value := make([]byte, o.Size)
	_, _ = rand.Read(value)
	clients := make([]*kgo.Client, o.Producers)
	for i := range clients {
		var extra []kgo.Opt
		if !o.Plain {
			extra = append(extra, kgo.TransactionalID(fmt.Sprintf("bench-txn-%d-%d", time.Now().UnixNano(), i)))
		}
		cl, err := o.client(extra...)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		clients[i] = cl
	}
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	per := o.Txns / o.Producers
	lats := make([][]time.Duration, o.Producers)
	errs := make([]error, o.Producers)
	var wg sync.WaitGroup
	for p, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				t0 := time.Now()
				if !o.Plain {
					if errs[p] = cl.BeginTransaction(); errs[p] != nil {
						return
					}
				}
				for range o.TxnSize {
					cl.Produce(ctx, &kgo.Record{Value: value}, nil)
				}
				errs[p] = cl.Flush(ctx)
				if errs[p] == nil && !o.Plain {
					errs[p] = cl.EndTransaction(ctx, kgo.TryCommit)
				}
				if errs[p] != nil {
					return
				}
				lats[p] = append(lats[p], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	var all []time.Duration
	for p := range lats {
		if errs[p] != nil {
			return nil, errs[p]
		}
		all = append(all, lats[p]...)
	}
	kind := "transactions"
	if o.Plain {
		kind = "flushed groups (no transaction)"
	}
	n := int64(len(all))
	r := &Report{Name: fmt.Sprintf("kafka %s of %d × %d B records, %d producers, %d partitions", kind, o.TxnSize, o.Size, o.Producers, o.Partitions),
		Records: n, Messages: n * int64(o.TxnSize), Bytes: n * int64(o.TxnSize*o.Size), Elapsed: el, CPU: cpuTime() - cpu0, Latencies: all}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	r.Extra = append(r.Extra, fmt.Sprintf("%.0f %s/s, %.0f records/s (latency: per transaction, begin to committed)",
		float64(n)/el.Seconds(), kind, float64(n)*float64(o.TxnSize)/el.Seconds()))
	o.brokerExtra(r, bcpu0)
	return r, nil
}
