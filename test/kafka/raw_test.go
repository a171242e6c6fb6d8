package kafka_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawBatch builds a one-record batch for producer pid at sequence seq.
func rawBatch(pid int64, epoch int16, seq int32, value string) []byte {
	rec := kmsg.Record{Value: []byte(value)}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the body after the (one-byte) zero length
	b := kmsg.RecordBatch{Magic: 2, PartitionLeaderEpoch: -1, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: 1, FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(), Records: rec.AppendTo(nil)}
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli)))
	return enc
}

func produceRaw(t *testing.T, cl *kgo.Client, topic string, batch []byte) (int16, int64) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}

// TestIdempotentDuplicateAndGap sends a batch twice and then a batch with a
// sequence gap: the retry gets its original offset without a second copy and
// the gap is refused.
func TestIdempotentDuplicateAndGap(t *testing.T) {
	n := startNode(t)
	cl := newClient(t, n.KafkaAddr())
	ctx := ctxTimeout(t, 30*time.Second)
	ct := kmsg.NewPtrCreateTopicsRequest()
	tt := kmsg.NewCreateTopicsRequestTopic()
	tt.Topic, tt.NumPartitions, tt.ReplicationFactor = "raw-idem", 1, 1
	ct.Topics = append(ct.Topics, tt)
	if _, err := ct.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	ip, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, cl)
	if err != nil || ip.ErrorCode != 0 {
		t.Fatalf("init producer id: %v %d", err, ip.ErrorCode)
	}
	pid, epoch := ip.ProducerID, ip.ProducerEpoch
	if code, off := produceRaw(t, cl, "raw-idem", rawBatch(pid, epoch, 0, "a")); code != 0 || off != 0 {
		t.Fatalf("first: %d %d", code, off)
	}
	if code, off := produceRaw(t, cl, "raw-idem", rawBatch(pid, epoch, 1, "b")); code != 0 || off != 1 {
		t.Fatalf("second: %d %d", code, off)
	}
	if code, off := produceRaw(t, cl, "raw-idem", rawBatch(pid, epoch, 0, "a")); code != 0 || off != 0 {
		t.Fatalf("retry of first: %d %d", code, off)
	}
	if code, _ := produceRaw(t, cl, "raw-idem", rawBatch(pid, epoch, 5, "gap")); code != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap: code %d", code)
	}
	if code, _ := produceRaw(t, cl, "raw-idem", rawBatch(pid, epoch-1, 2, "old")); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("old epoch: code %d", code)
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "raw-idem"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	lr, err := lo.RequestWith(ctx, cl)
	if err != nil || lr.Topics[0].Partitions[0].Offset != 2 {
		t.Fatalf("end offset: %v %+v", err, lr)
	}
}

// keyedBatch builds an uncompressed batch with one record per key ("" is a
// null key).
func keyedBatch(keys []string) []byte {
	var recs []byte
	for i, k := range keys {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte("v")}
		if k != "" {
			r.Key = []byte(k)
		}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{Magic: 2, PartitionLeaderEpoch: -1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		LastOffsetDelta: int32(len(keys) - 1), NumRecords: int32(len(keys)), FirstTimestamp: now, MaxTimestamp: now, Records: recs}
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli)))
	return enc
}
