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
	"google.golang.org/protobuf/encoding/protowire"

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
	props        []kbatch.RecordHeader
	partitionKey []byte
	keyB64       bool
	orderingKey  []byte
	eventTime    uint64
	nullValue    bool
	payload      []byte
}

// parseSingle decodes a batched message's SingleMessageMetadata into m
// and returns its payload size, by hand (protobuf's reflection was the
// largest cost of the produce path). Unknown fields are skipped; the
// payload size is required.
func parseSingle(b []byte, m *sentMessage) (int32, error) {
	size, sized := int32(0), false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == smmProperties && typ == protowire.BytesType:
			kv, err := parseKeyValue(v)
			if err != nil {
				return 0, err
			}
			m.props = append(m.props, kv)
		case num == smmPartitionKey && typ == protowire.BytesType:
			m.partitionKey = v
		case num == smmPayloadSize && typ == protowire.VarintType:
			size, sized = int32(x), true
		case num == smmEventTime && typ == protowire.VarintType:
			m.eventTime = x
		case num == smmKeyB64 && typ == protowire.VarintType:
			m.keyB64 = x != 0
		case num == smmOrderingKey && typ == protowire.BytesType:
			m.orderingKey = v
		case num == smmNullValue && typ == protowire.VarintType:
			m.nullValue = x != 0
		}
	}
	if !sized {
		return 0, errors.New("no payload size")
	}
	return size, nil
}

// parseKeyValue decodes a property.
func parseKeyValue(b []byte) (kbatch.RecordHeader, error) {
	kv := kbatch.RecordHeader{Value: []byte{}}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return kv, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != kvKey && num != kvValue) {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return kv, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return kv, protowire.ParseError(n)
		}
		b = b[n:]
		if num == kvKey {
			kv.Key = string(v)
		} else {
			kv.Value = v
		}
	}
	return kv, nil
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
		m := sentMessage{partitionKey: []byte(md.GetPartitionKey()), keyB64: md.GetPartitionKeyB64Encoded(),
			orderingKey: md.OrderingKey, eventTime: md.GetEventTime(), nullValue: md.GetNullValue(), payload: plain}
		for _, kv := range md.Properties {
			m.props = append(m.props, kbatch.RecordHeader{Key: kv.GetKey(), Value: []byte(kv.GetValue())})
		}
		msgs = []sentMessage{m}
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
			var m sentMessage
			ps, err := parseSingle(rest[4:4+size], &m)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: single message metadata: %w", ErrBadFrame, err)
			}
			rest = rest[4+size:]
			if ps < 0 || int(ps) > len(rest) {
				return nil, nil, fmt.Errorf("%w: payload of %d bytes", ErrBadFrame, ps)
			}
			m.payload = rest[:ps:ps]
			msgs = append(msgs, m)
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
		case len(m.partitionKey) > 0 && m.keyB64:
			r.Key = make([]byte, base64.StdEncoding.DecodedLen(len(m.partitionKey)))
			n, err := base64.StdEncoding.Decode(r.Key, m.partitionKey)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: partition key: %w", ErrBadFrame, err)
			}
			r.Key = r.Key[:n]
		case len(m.partitionKey) > 0:
			r.Key = m.partitionKey
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
		r.Headers = m.props
		if len(m.orderingKey) > 0 && len(m.partitionKey) > 0 {
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
	// codec is the payload's compression (the stored batch's), and
	// uncompressed its size before (0: not compressed).
	codec        pulsarpb.CompressionType
	uncompressed int
}

// compressEntry compresses an entry's payload as its stored batch was
// (Kafka's gzip as Pulsar's ZLIB: both deflate), so a compressed batch —
// a Pulsar producer's, or a Kafka producer's — reaches Pulsar consumers
// compressed; a payload that does not shrink goes as it is.
func (s *Server) compressEntry(e *entry, codec int) {
	var out []byte
	var ct pulsarpb.CompressionType
	switch codec {
	case kbatch.CodecLZ4:
		buf := make([]byte, lz4.CompressBlockBound(len(e.payload)))
		if n, err := lz4.CompressBlock(e.payload, buf, nil); err == nil && n > 0 {
			out, ct = buf[:n], pulsarpb.CompressionType_LZ4
		}
	case kbatch.CodecZstd:
		if enc, err := s.zstdEncoder(); err == nil {
			out, ct = enc.EncodeAll(e.payload, make([]byte, 0, len(e.payload)/2)), pulsarpb.CompressionType_ZSTD
		}
	case kbatch.CodecSnappy:
		out, ct = snappy.Encode(nil, e.payload), pulsarpb.CompressionType_SNAPPY
	case kbatch.CodecGzip:
		var b bytes.Buffer
		if w, err := zlib.NewWriterLevel(&b, zlib.BestSpeed); err == nil {
			if _, err := w.Write(e.payload); err == nil && w.Close() == nil {
				out, ct = b.Bytes(), pulsarpb.CompressionType_ZLIB
			}
		}
	}
	if out != nil && len(out) < len(e.payload) {
		e.uncompressed, e.payload, e.codec = len(e.payload), out, ct
	}
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
		e.payload = make([]byte, 0, len(r.Payload)+int(r.Count)*16)
		err = s.batches.Records(r.Payload, true, func(kr *kbatch.Record) bool {
			sm := singleMeta{key: kr.Key, hasKey: !kr.KeyNull, headers: kr.Headers, nullValue: kr.ValueNull}
			if !pulsarMade || id.hasEventTime(int(kr.OffsetDelta)) {
				sm.eventTime, sm.hasEventTime = uint64(max(kr.Timestamp, 0)), true
			}
			e.payload = appendSingle(e.payload, &sm, kr.Value)
			n++
			return true
		})
		e.count = n
		if err == nil && n > 0 && len(r.Payload) >= kbatch.HeaderSize {
			h := kbatch.ReadHeader(r.Payload)
			s.compressEntry(&e, h.Codec())
		}
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

// singleMeta is one batched message's SingleMessageMetadata, encoded by
// hand: on the consume path protobuf's reflection cost more than the rest
// of an entry's conversion.
type singleMeta struct {
	key          []byte
	hasKey       bool
	eventTime    uint64
	hasEventTime bool
	orderingKey  []byte
	nullValue    bool
	// headers become properties (addProperty's rules); tags, when set,
	// one more.
	headers []kbatch.RecordHeader
	tags    string
}

// SingleMessageMetadata's and KeyValue's field numbers.
const (
	smmProperties   protowire.Number = 1
	smmPartitionKey protowire.Number = 2
	smmPayloadSize  protowire.Number = 3
	smmEventTime    protowire.Number = 5
	smmKeyB64       protowire.Number = 6
	smmOrderingKey  protowire.Number = 7
	smmNullValue    protowire.Number = 9
	kvKey           protowire.Number = 1
	kvValue         protowire.Number = 2
)

// property reports whether a stored header is a message property (the
// ordering key has a field of its own; timer headers were honoured).
func property(key string) bool {
	switch key {
	case HeaderOrderingKey, broker.HeaderTimerDeliverMs, broker.HeaderTimerDelayMs, broker.HeaderTimerDelaySec, broker.HeaderTimerOutMs:
		return false
	}
	return true
}

func kvSize(key string, value []byte) int {
	return protowire.SizeTag(kvKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(kvValue) + protowire.SizeBytes(len(value))
}

// size is the encoded metadata's size with a payload of n bytes.
func (m *singleMeta) size(n int) int {
	size := 0
	for _, h := range m.headers {
		if property(h.Key) {
			size += protowire.SizeTag(smmProperties) + protowire.SizeBytes(kvSize(h.Key, h.Value))
		}
	}
	if m.tags != "" {
		size += protowire.SizeTag(smmProperties) + protowire.SizeBytes(kvSize(broker.KafkaTagsHeader, []byte(m.tags)))
	}
	if m.hasKey {
		size += protowire.SizeTag(smmPartitionKey) + protowire.SizeBytes(len(m.key))
	}
	size += protowire.SizeTag(smmPayloadSize) + protowire.SizeVarint(uint64(int64(int32(n))))
	if m.hasEventTime {
		size += protowire.SizeTag(smmEventTime) + protowire.SizeVarint(m.eventTime)
	}
	if m.orderingKey != nil {
		size += protowire.SizeTag(smmOrderingKey) + protowire.SizeBytes(len(m.orderingKey))
	}
	if m.nullValue {
		size += protowire.SizeTag(smmNullValue) + 1
	}
	return size
}

func appendKV(dst []byte, key string, value []byte) []byte {
	dst = protowire.AppendTag(dst, smmProperties, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(kvSize(key, value)))
	dst = protowire.AppendTag(dst, kvKey, protowire.BytesType)
	dst = protowire.AppendString(dst, key)
	dst = protowire.AppendTag(dst, kvValue, protowire.BytesType)
	return protowire.AppendBytes(dst, value)
}

// appendSingle appends one message of a batch payload: its metadata's
// size, the metadata, the payload.
func appendSingle(dst []byte, m *singleMeta, payload []byte) []byte {
	for _, h := range m.headers {
		if h.Key == HeaderOrderingKey {
			m.orderingKey = h.Value
		}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.size(len(payload))))
	for _, h := range m.headers {
		if property(h.Key) {
			dst = appendKV(dst, h.Key, h.Value)
		}
	}
	if m.tags != "" {
		dst = appendKV(dst, broker.KafkaTagsHeader, []byte(m.tags))
	}
	if m.hasKey {
		dst = protowire.AppendTag(dst, smmPartitionKey, protowire.BytesType)
		dst = protowire.AppendBytes(dst, m.key)
	}
	dst = protowire.AppendTag(dst, smmPayloadSize, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(int64(int32(len(payload)))))
	if m.hasEventTime {
		dst = protowire.AppendTag(dst, smmEventTime, protowire.VarintType)
		dst = protowire.AppendVarint(dst, m.eventTime)
	}
	if m.orderingKey != nil {
		dst = protowire.AppendTag(dst, smmOrderingKey, protowire.BytesType)
		dst = protowire.AppendBytes(dst, m.orderingKey)
	}
	if m.nullValue {
		dst = protowire.AppendTag(dst, smmNullValue, protowire.VarintType)
		dst = protowire.AppendVarint(dst, 1)
	}
	return append(dst, payload...)
}

// messageMetadata is a neutral message's metadata within a batch.
func messageMetadata(m *model.Message) *singleMeta {
	sm := &singleMeta{eventTime: uint64(max(m.BornTime, 0)), hasEventTime: true, tags: m.Tags, key: m.Key, hasKey: m.Key != nil}
	for _, h := range m.Headers {
		sm.headers = append(sm.headers, kbatch.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return sm
}
