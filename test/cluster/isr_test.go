//go:build !race

package cluster_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkISR waits until every live member's Kafka metadata lists, for
// every partition of topic, every replica in sync but gone (nil: every
// replica), and fails after within.
func checkISR(ctx context.Context, t *testing.T, c *cluster, topic string, gone *member, within time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		ok, last := true, ""
		for _, m := range c.members {
			if m.cmd == nil || m == gone {
				continue
			}
			if mok, got := isrAsSeenBy(ctx, c, m, topic, gone); !mok {
				ok, last = false, fmt.Sprintf("member %d: %s", m.id, got)
				break
			}
		}
		if ok {
			return
		}
		if time.Since(start) > within {
			t.Fatalf("in-sync replicas of %s not as expected in %v; %s", topic, within, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isrAsSeenBy asks member m for topic's metadata: whether each partition
// lists as in sync exactly its replicas but gone, and what it listed.
func isrAsSeenBy(ctx context.Context, c *cluster, m *member, topic string, gone *member) (bool, string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrOf(m, 0)), kgo.RequestRetries(0))
	if err != nil {
		return false, err.Error()
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl.SeedBrokers()[0])
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		return false, fmt.Sprint(err)
	}
	ok, got := len(resp.Topics[0].Partitions) > 0, ""
	for _, p := range resp.Topics[0].Partitions {
		want := slices.Clone(p.Replicas)
		if gone != nil {
			want = slices.DeleteFunc(want, func(id int32) bool { return int(id) == gone.id })
		}
		isr := slices.Sorted(slices.Values(p.ISR))
		slices.Sort(want)
		if !slices.Equal(isr, want) {
			ok = false
		}
		got += fmt.Sprintf(" %d:leader %d epoch %d isr %v/%v", p.Partition, p.Leader, p.LeaderEpoch, p.ISR, p.Replicas)
	}
	return ok, got
}

// minInSyncProbe produces once every 100 ms with acks=all and no retries
// to a topic whose min.insync.replicas is its replication factor,
// recording whether the last answer per partition was a refusal for too
// few replicas in sync.
type minInSyncProbe struct {
	c      *cluster
	topic  string
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	codes  map[int32]error // the last answer of each partition
	other  error           // the last answer that was neither
}

func startMinInSyncProbe(t *testing.T, c *cluster, topic string) *minInSyncProbe {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &minInSyncProbe{c: c, topic: topic, cancel: cancel, done: make(chan struct{}), codes: map[int32]error{}}
	go func() {
		defer close(p.done)
		defer cl.Close()
		for ctx.Err() == nil {
			p.round(ctx, cl)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return p
}

// round produces one record with acks=all to each partition's leader as
// the metadata names it (raw requests: a client's own retries and leader
// moves would hide the answers).
func (p *minInSyncProbe) round(ctx context.Context, cl *kgo.Client) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(p.topic)
	mreq.Topics = append(mreq.Topics, mt)
	meta, err := mreq.RequestWith(rctx, cl)
	if err != nil || len(meta.Topics) != 1 {
		return
	}
	for _, mp := range meta.Topics[0].Partitions {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = p.topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = mp.Partition, probeBatch()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(rctx, cl.Broker(int(mp.Leader)))
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
		}
		p.mu.Lock()
		p.codes[mp.Partition] = err
		if err != nil && !errors.Is(err, kerr.NotEnoughReplicas) {
			p.other = err
		}
		p.mu.Unlock()
	}
}

// probeBatch is a record batch of one record, not idempotent.
func probeBatch() []byte {
	rec := kmsg.Record{Value: []byte("probe")}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the body after the (one-byte) zero length
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{Magic: 2, PartitionLeaderEpoch: -1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: 1, FirstTimestamp: now, MaxTimestamp: now, Records: rec.AppendTo(nil)}
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli)))
	return enc
}

// waitRefused waits until every partition's last acks=all produce was
// refused with NOT_ENOUGH_REPLICAS (a member of every group is gone).
func (p *minInSyncProbe) waitRefused(t *testing.T, within time.Duration) {
	t.Helper()
	p.wait(t, within, "acks=all refused with NOT_ENOUGH_REPLICAS", func(err error) bool { return errors.Is(err, kerr.NotEnoughReplicas) })
}

// waitAccepted waits until every partition's last acks=all produce was
// acknowledged.
func (p *minInSyncProbe) waitAccepted(t *testing.T, within time.Duration) {
	t.Helper()
	p.wait(t, within, "acks=all acknowledged again", func(err error) bool { return err == nil })
}

func (p *minInSyncProbe) wait(t *testing.T, within time.Duration, what string, ok func(error) bool) {
	t.Helper()
	start := time.Now()
	for done := false; !done; time.Sleep(50 * time.Millisecond) {
		p.mu.Lock()
		done = len(p.codes) == 6
		for _, err := range p.codes {
			done = done && ok(err)
		}
		last := fmt.Sprint(p.codes)
		if done {
			clear(p.codes)
		}
		p.mu.Unlock()
		if !done && time.Since(start) > within {
			for _, m := range p.c.members {
				if m.cmd != nil {
					_, got := isrAsSeenBy(context.Background(), p.c, m, p.topic, nil)
					t.Logf("member %d's metadata:%s", m.id, got)
				}
			}
			t.Fatalf("%s: not in %v; last answers %s", what, within, last)
		}
	}
	t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
}

func (p *minInSyncProbe) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	<-p.done
	if p.other != nil {
		t.Logf("min.insync probe: last other answer %v", p.other)
	}
}

// addrOf is member m's address of the listener ports[i].
func (c *cluster) addrOf(m *member, i int) string {
	return net.JoinHostPort(m.host, strconv.Itoa(c.ports[i]))
}
