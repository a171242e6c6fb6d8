package pulsar

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// How Pulsar messages are stored. A producer's batch (one SEND) is one
// Kafka record batch — one stored record, so one Pulsar entry whose
// entryId is its base queue offset and whose messages are its records —
// and Kafka consumers read it as it is: the partition key is the record
// key (the ordering key when there is none), properties are headers, the
// event time (else the publish time) is the timestamp, a null value a
// tombstone; a delivery time becomes the timer header the broker's timer
// store honours. The batch keeps the producer's codec where Kafka has
// it: LZ4, ZSTD, ZLIB (as gzip) and Snappy.

// ErrUnsupported is a message this broker does not store.
var ErrUnsupported = errors.New("not supported")

// maxUncompressed bounds a batch's size after decompression.
const maxUncompressed = 64 << 20

// kafkaCodec is the Kafka codec a batch compressed with c is stored with.
func kafkaCodec(c pulsarpb.CompressionType) int {
	switch c {
	case pulsarpb.CompressionType_LZ4:
		return kbatch.CodecLZ4
	case pulsarpb.CompressionType_ZLIB:
		return kbatch.CodecGzip
	case pulsarpb.CompressionType_ZSTD:
		return kbatch.CodecZstd
	case pulsarpb.CompressionType_SNAPPY:
		return kbatch.CodecSnappy
	}
	return kbatch.CodecNone
}

var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxUncompressed))
})

// decompress returns a SEND's payload uncompressed.
func decompress(md *pulsarpb.MessageMetadata, payload []byte) ([]byte, error) {
	c := md.GetCompression()
	if c == pulsarpb.CompressionType_NONE || md.GetUncompressedSize() == 0 {
		return payload, nil
	}
	n := int(md.GetUncompressedSize())
	if n > maxUncompressed {
		return nil, fmt.Errorf("%w: %d bytes uncompressed", ErrBadFrame, n)
	}
	switch c {
	case pulsarpb.CompressionType_LZ4:
		out := make([]byte, n)
		got, err := lz4.UncompressBlock(payload, out)
		if err != nil || got != n {
			return nil, fmt.Errorf("%w: lz4 payload: %v", ErrBadFrame, err)
		}
		return out, nil
	case pulsarpb.CompressionType_ZLIB:
		r, err := zlib.NewReader(bytes.NewReader(payload))
		if err != nil {
			return nil, fmt.Errorf("%w: zlib payload: %w", ErrBadFrame, err)
		}
		out, err := io.ReadAll(io.LimitReader(r, int64(n)+1))
		if err != nil || len(out) != n {
			return nil, fmt.Errorf("%w: zlib payload: %v", ErrBadFrame, err)
		}
		return out, nil
	case pulsarpb.CompressionType_ZSTD:
		d, err := zstdDecoder()
		if err != nil {
			return nil, err
		}
		out, err := d.DecodeAll(payload, make([]byte, 0, n))
		if err != nil || len(out) != n {
			return nil, fmt.Errorf("%w: zstd payload: %v", ErrBadFrame, err)
		}
		return out, nil
	case pulsarpb.CompressionType_SNAPPY:
		if dl, err := snappy.DecodedLen(payload); err != nil || dl != n {
			return nil, fmt.Errorf("%w: snappy payload", ErrBadFrame)
		}
		out, err := snappy.Decode(nil, payload)
		if err != nil {
			return nil, fmt.Errorf("%w: snappy payload: %w", ErrBadFrame, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: compression %d", ErrBadFrame, c)
}

// sentMessage is one message of a SEND, whatever its batching.
type sentMessage struct {
	props        []*pulsarpb.KeyValue
	partitionKey string
	keyB64       bool
	orderingKey  []byte
	eventTime    uint64
	nullValue    bool
	payload      []byte
}

// DecodeSend returns the records a SEND's payload holds, in the Kafka
// form they are stored in, and which of them came without an event time
// (bit i of noEvent; nil when all had one).
func DecodeSend(md *pulsarpb.MessageMetadata, payload []byte) (recs []kbatch.NewRecord, noEvent []byte, err error) {
	if md.GetNumChunksFromMsg() > 1 {
		return nil, nil, fmt.Errorf("%w: chunked messages", ErrUnsupported)
	}
	if len(md.GetEncryptionKeys()) > 0 {
		return nil, nil, fmt.Errorf("%w: end-to-end encrypted messages (their batches cannot be stored as records)", ErrUnsupported)
	}
	plain, err := decompress(md, payload)
	if err != nil {
		return nil, nil, err
	}
	var msgs []sentMessage
	if md.NumMessagesInBatch == nil {
		msgs = []sentMessage{{props: md.Properties, partitionKey: md.GetPartitionKey(), keyB64: md.GetPartitionKeyB64Encoded(),
			orderingKey: md.OrderingKey, eventTime: md.GetEventTime(), nullValue: md.GetNullValue(), payload: plain}}
	} else {
		n := int(md.GetNumMessagesInBatch())
		if n <= 0 || n > len(plain) {
			return nil, nil, fmt.Errorf("%w: a batch of %d messages in %d bytes", ErrBadFrame, n, len(plain))
		}
		msgs = make([]sentMessage, 0, n)
		rest := plain
		for range n {
			if len(rest) < 4 {
				return nil, nil, fmt.Errorf("%w: batch truncated", ErrBadFrame)
			}
			size := binary.BigEndian.Uint32(rest)
			if uint64(size) > uint64(len(rest)-4) {
				return nil, nil, fmt.Errorf("%w: single message metadata of %d bytes", ErrBadFrame, size)
			}
			var smm pulsarpb.SingleMessageMetadata
			if err := proto.Unmarshal(rest[4:4+size], &smm); err != nil {
				return nil, nil, fmt.Errorf("%w: single message metadata: %w", ErrBadFrame, err)
			}
			rest = rest[4+size:]
			ps := smm.GetPayloadSize()
			if ps < 0 || int(ps) > len(rest) {
				return nil, nil, fmt.Errorf("%w: payload of %d bytes", ErrBadFrame, ps)
			}
			msgs = append(msgs, sentMessage{props: smm.Properties, partitionKey: smm.GetPartitionKey(), keyB64: smm.GetPartitionKeyB64Encoded(),
				orderingKey: smm.OrderingKey, eventTime: smm.GetEventTime(), nullValue: smm.GetNullValue(), payload: rest[:ps:ps]})
			rest = rest[ps:]
		}
	}
	publish := int64(md.GetPublishTime())
	out := make([]kbatch.NewRecord, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		r := &out[i]
		r.Timestamp = publish
		if m.eventTime > 0 {
			r.Timestamp = int64(m.eventTime)
		} else {
			if noEvent == nil {
				noEvent = make([]byte, (len(msgs)+7)/8)
			}
			noEvent[i/8] |= 1 << (i % 8)
		}
		switch {
		case m.partitionKey != "" && m.keyB64:
			if r.Key, err = base64.StdEncoding.DecodeString(m.partitionKey); err != nil {
				return nil, nil, fmt.Errorf("%w: partition key: %w", ErrBadFrame, err)
			}
		case m.partitionKey != "":
			r.Key = []byte(m.partitionKey)
		case len(m.orderingKey) > 0:
			r.Key = m.orderingKey
		}
		if m.nullValue {
			r.ValueNull = true
		} else {
			r.Value = m.payload
			if r.Value == nil {
				r.Value = []byte{}
			}
		}
		for _, kv := range m.props {
			r.Headers = append(r.Headers, kbatch.RecordHeader{Key: kv.GetKey(), Value: []byte(kv.GetValue())})
		}
		if len(m.orderingKey) > 0 && m.partitionKey != "" {
			r.Headers = append(r.Headers, kbatch.RecordHeader{Key: HeaderOrderingKey, Value: m.orderingKey})
		}
		if at := md.GetDeliverAtTime(); at > 0 {
			r.Headers = append(r.Headers, kbatch.RecordHeader{Key: broker.HeaderTimerDeliverMs, Value: strconv.AppendInt(nil, at, 10)})
		}
	}
	return out, noEvent, nil
}

// HeaderOrderingKey carries a Pulsar ordering key that differs from the
// partition key (the record key).
const HeaderOrderingKey = "pulsar.ordering_key"

// entry is a stored record as a Pulsar entry: its messages encoded as a
// batch payload.
type entry struct {
	base        model.QueueOffset
	count       int
	storeTime   int64
	publishTime int64 // the producer's (Pulsar batches), else the store time
	producer    string
	sequence    uint64
	payload     []byte
}

// encodeEntry converts a stored record into an entry; ok is false for
// records Pulsar consumers never see (Kafka transaction markers, aborted
// batches, internal records).
func (s *Server) encodeEntry(q model.QueueID, r *broker.StoredRecord) (e entry, ok bool, err error) {
	e = entry{base: r.BaseOffset, count: int(r.Count), storeTime: r.StoreTime, publishTime: r.StoreTime, sequence: uint64(r.BaseOffset)}
	id, pulsarMade := parseIdentity(r)
	if pulsarMade {
		e.producer, e.sequence = id.name, id.first
		if id.publish > 0 {
			e.publishTime = int64(id.publish)
		}
	}
	switch r.Format {
	case model.FormatKafkaBatchV2:
		if s.b.HiddenKafkaBatch(q, r) {
			return e, false, nil
		}
		n := 0
		err = s.batches.Records(r.Payload, true, func(kr *kbatch.Record) bool {
			smm := pulsarpb.SingleMessageMetadata{}
			if !pulsarMade || id.hasEventTime(int(kr.OffsetDelta)) {
				smm.EventTime = proto.Uint64(uint64(max(kr.Timestamp, 0)))
			}
			if !kr.KeyNull {
				smm.PartitionKey = proto.String(string(kr.Key))
			}
			for _, h := range kr.Headers {
				addProperty(&smm, h.Key, h.Value)
			}
			if kr.ValueNull {
				smm.NullValue = proto.Bool(true)
			}
			e.payload = appendSingle(e.payload, &smm, kr.Value)
			n++
			return true
		})
		e.count = n
	case model.FormatMessage:
		var m model.Message
		if m, err = broker.DecodeMessage(r.Payload); err == nil {
			m.Body, err = broker.PlainBody(&m)
		}
		if err != nil {
			return e, false, err
		}
		if e.producer == "" {
			e.producer = m.Producer
		}
		e.payload = appendSingle(e.payload, messageMetadata(&m), m.Body)
		e.count = 1
	default:
		return e, false, nil
	}
	return e, err == nil && e.count > 0, err
}

// appendSingle appends one message of a batch payload.
func appendSingle(dst []byte, smm *pulsarpb.SingleMessageMetadata, payload []byte) []byte {
	smm.PayloadSize = proto.Int32(int32(len(payload)))
	b, _ := proto.Marshal(smm)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	dst = append(dst, b...)
	return append(dst, payload...)
}

// addProperty adds a stored header to a message's metadata: the ordering
// key where it belongs, timer headers (already honoured) left out.
func addProperty(smm *pulsarpb.SingleMessageMetadata, key string, value []byte) {
	switch key {
	case HeaderOrderingKey:
		smm.OrderingKey = value
	case broker.HeaderTimerDeliverMs, broker.HeaderTimerDelayMs, broker.HeaderTimerDelaySec, broker.HeaderTimerOutMs:
	default:
		smm.Properties = append(smm.Properties, &pulsarpb.KeyValue{Key: proto.String(key), Value: proto.String(string(value))})
	}
}

// messageMetadata is a neutral message's metadata within a batch.
func messageMetadata(m *model.Message) *pulsarpb.SingleMessageMetadata {
	smm := &pulsarpb.SingleMessageMetadata{EventTime: proto.Uint64(uint64(max(m.BornTime, 0)))}
	if m.Key != nil {
		smm.PartitionKey = proto.String(string(m.Key))
	}
	for _, h := range m.Headers {
		addProperty(smm, h.Key, h.Value)
	}
	if m.Tags != "" {
		addProperty(smm, broker.KafkaTagsHeader, []byte(m.Tags))
	}
	return smm
}
