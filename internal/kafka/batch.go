package kafka

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// batchHeaderSize is the fixed part of a record batch (magic 2).
const batchHeaderSize = 61

// batchCRCFrom is where the bytes covered by a batch's CRC begin.
const batchCRCFrom = 21

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// batchHeader is the fixed header of a record batch v2.
type batchHeader struct {
	FirstOffset          int64
	Length               int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

const (
	attrCompressionMask = 0x07
	attrLogAppendTime   = 0x08
	attrTransactional   = 0x10
	attrControl         = 0x20
)

// errCorruptBatch marks a produce payload that is not a valid batch.
type batchError struct {
	reason      string
	corrupt     bool // CORRUPT_MESSAGE rather than INVALID_RECORD
	unsupported bool // an old message format (magic 0 or 1)
}

func (e *batchError) Error() string { return "kafka: " + e.reason }

// readBatchHeader decodes the header at the start of b without checks.
func readBatchHeader(b []byte) batchHeader {
	be := binary.BigEndian
	return batchHeader{
		FirstOffset:          int64(be.Uint64(b)),
		Length:               int32(be.Uint32(b[8:])),
		PartitionLeaderEpoch: int32(be.Uint32(b[12:])),
		Magic:                int8(b[16]),
		CRC:                  be.Uint32(b[17:]),
		Attributes:           int16(be.Uint16(b[21:])),
		LastOffsetDelta:      int32(be.Uint32(b[23:])),
		FirstTimestamp:       int64(be.Uint64(b[27:])),
		MaxTimestamp:         int64(be.Uint64(b[35:])),
		ProducerID:           int64(be.Uint64(b[43:])),
		ProducerEpoch:        int16(be.Uint16(b[51:])),
		BaseSequence:         int32(be.Uint32(b[53:])),
		NumRecords:           int32(be.Uint32(b[57:])),
	}
}

// splitBatches validates the record batches of one produced partition and
// returns each batch's bytes and header. It checks framing, magic, the CRC
// and the record count; it never decompresses.
func splitBatches(b []byte) ([][]byte, []batchHeader, error) {
	var out [][]byte
	var hs []batchHeader
	for len(b) > 0 {
		if len(b) < batchHeaderSize {
			return nil, nil, &batchError{reason: fmt.Sprintf("%d trailing bytes are not a record batch", len(b)), corrupt: true}
		}
		h := readBatchHeader(b)
		if h.Magic != 2 {
			return nil, nil, &batchError{reason: fmt.Sprintf("record batch magic %d: only magic 2 is supported", h.Magic), unsupported: true}
		}
		total := int64(h.Length) + 12
		if h.Length < batchHeaderSize-12 || total > int64(len(b)) {
			return nil, nil, &batchError{reason: fmt.Sprintf("batch length %d with %d bytes", h.Length, len(b)), corrupt: true}
		}
		batch := b[:total]
		if crc32.Checksum(batch[batchCRCFrom:], crc32c) != h.CRC {
			return nil, nil, &batchError{reason: "record batch CRC mismatch", corrupt: true}
		}
		if h.NumRecords <= 0 || h.LastOffsetDelta != h.NumRecords-1 {
			return nil, nil, &batchError{reason: fmt.Sprintf("batch with %d records and last offset delta %d", h.NumRecords, h.LastOffsetDelta)}
		}
		if h.Attributes&attrCompressionMask > 4 {
			return nil, nil, &batchError{reason: fmt.Sprintf("unknown compression codec %d", h.Attributes&attrCompressionMask)}
		}
		out = append(out, batch)
		hs = append(hs, h)
		b = b[total:]
	}
	if len(out) == 0 {
		return nil, nil, &batchError{reason: "no record batch", corrupt: true}
	}
	return out, hs, nil
}

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
		return appendMessageBatch(dst, int64(r.BaseOffset), r.StoreTime, &m), nil
	default:
		return dst, nil // internal records are not shown to Kafka clients
	}
}

// appendMessageBatch encodes one neutral message as a one-record batch.
func appendMessageBatch(dst []byte, offset, storeTime int64, m *model.Message) []byte {
	ts := m.BornTime
	if ts == 0 {
		ts = storeTime
	}
	rec := kmsg.Record{Key: m.Key, Value: m.Body}
	if m.Key == nil {
		rec.Key = nil
	}
	for _, h := range m.Headers {
		rec.Headers = append(rec.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
	}
	if m.Tags != "" {
		rec.Headers = append(rec.Headers, kmsg.Header{Key: tagsHeader, Value: []byte(m.Tags)})
	}
	recBytes := rec.AppendTo(nil)
	b := kmsg.RecordBatch{
		FirstOffset: offset, PartitionLeaderEpoch: -1, Magic: 2,
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: 1, Records: recBytes,
	}
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[21:], crc32c))
	return append(dst, enc...)
}

// tagsHeader is the Kafka header that carries RocketMQ tags.
const tagsHeader = "rocketmq.TAGS"
