package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaShareOptions describe a share group (KIP-932) reading a topic from
// its start with franz-go's share consumer.
type KafkaShareOptions struct {
	KafkaOptions
	Members int
	// AckEach accepts every record explicitly and waits for the
	// acknowledgements after each poll (one ShareAcknowledge or piggyback
	// per poll); otherwise records are accepted implicitly, carried by the
	// next ShareFetch.
	AckEach bool
	// MaxRecords is each ShareFetch's MaxRecords (max.poll.records).
	MaxRecords int32
}

// KafkaShare reads o.Messages records of a topic with a new share group of
// o.Members members starting at the topic's start.
func KafkaShare(ctx context.Context, o KafkaShareOptions) (*Report, error) {
	group := fmt.Sprintf("bench-share-%d", time.Now().UnixNano())
	admin, err := o.client()
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	if resp, err := req.RequestWith(ctx, admin); err != nil {
		return nil, err
	} else if len(resp.Resources) == 1 && resp.Resources[0].ErrorCode != 0 {
		return nil, fmt.Errorf("share group config: error code %d", resp.Resources[0].ErrorCode)
	}
	members := max(o.Members, 1)
	maxRecords := o.MaxRecords
	if maxRecords <= 0 {
		maxRecords = 500
	}
	var n, bytes atomic.Int64
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, members)
	var wg sync.WaitGroup
	for range members {
		cl, err := o.client(kgo.ShareGroup(group), kgo.ConsumeTopics(o.Topic), kgo.ShareMaxRecords(maxRecords),
			kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				fs := cl.PollFetches(cctx)
				if err := fs.Err0(); err != nil && cctx.Err() == nil {
					errs <- err
					return
				}
				var got, b int64
				fs.EachRecord(func(r *kgo.Record) {
					got++
					b += int64(len(r.Value))
					if o.AckEach {
						r.Ack(kgo.AckAccept)
					}
				})
				if o.AckEach && got > 0 {
					if err := cl.FlushAcks(cctx); err != nil && cctx.Err() == nil {
						errs <- err
						return
					}
				}
				bytes.Add(b)
				if n.Add(got) >= o.Messages {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	how := "implicit acceptance (with the next fetch)"
	if o.AckEach {
		how = "each record accepted, acknowledgements flushed per poll"
	}
	r := &Report{Name: fmt.Sprintf("kafka share group: %d members reading from the start, max %d records per fetch, %s", members, maxRecords, how),
		Records: n.Load(), Messages: n.Load(), Bytes: bytes.Load(), Elapsed: time.Since(start), CPU: cpuTime() - cpu0}
	r.RSSBytes, r.PeakRSS, r.AnonBytes = rss()
	o.brokerExtra(r, bcpu0)
	return r, nil
}
