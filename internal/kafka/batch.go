package kafka

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
)

// appendStoredAsBatches appends a stored record to dst as Kafka record
// batches: Kafka batches as they are, other formats converted.
func appendStoredAsBatches(dst []byte, r *broker.StoredRecord) ([]byte, error) {
	switch r.Format {
	case model.FormatKafkaBatchV2:
		return append(dst, r.Payload...), nil
	case model.FormatMessage:
		m, err := broker.DecodeMessage(r.Payload)
		if err != nil {
			return dst, err
		}
		if m.Body, err = broker.PlainBody(&m); err != nil {
			return dst, err
		}
		return appendMessageBatch(dst, int64(r.BaseOffset), r.StoreTime, &m), nil
	default:
		return dst, nil // internal records are not shown to Kafka clients
	}
}

// messageBatchOverhead is about what a one-record batch adds to a stored
// message's bytes (batch header and record framing), to size buffers.
const messageBatchOverhead = 96

// appendMessageBatch encodes one neutral message as a one-record batch.
func appendMessageBatch(dst []byte, offset, storeTime int64, m *model.Message) []byte {
	ts := m.BornTime
	if ts == 0 {
		ts = storeTime
	}
	rec := kmsg.NewRecord()
	rec.Key = m.Key
	rec.Value = m.Body
	if m.Key == nil {
		rec.Key = nil
	}
	for _, h := range m.Headers {
		h2 := kmsg.NewHeader()
		h2.Key = h.Key
		h2.Value = h.Value
		rec.Headers = append(rec.Headers, h2)
	}
	if m.Tags != "" {
		h := kmsg.NewHeader()
		h.Key = tagsHeader
		h.Value = []byte(m.Tags)
		rec.Headers = append(rec.Headers, h)
	}
	// The record's length prefix counts what follows it: encode once with
	// length 0 (one byte) to learn it.
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	recBytes := rec.AppendTo(nil)
	b := kmsg.NewRecordBatch()
	b.FirstOffset = offset
	b.PartitionLeaderEpoch = -1
	b.Magic = 2
	b.FirstTimestamp = ts
	b.MaxTimestamp = ts
	b.ProducerID = -1
	b.ProducerEpoch = -1
	b.FirstSequence = -1
	b.NumRecords = 1
	b.Records = recBytes
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[kbatch.CRCFrom:], kbatch.CRC32C))
	return append(dst, enc...)
}

// tagsHeader is the Kafka header that carries RocketMQ tags.
const tagsHeader = "rocketmq.TAGS"
