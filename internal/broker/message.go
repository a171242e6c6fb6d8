package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zlib"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// messageVersion is the version byte of the neutral message encoding
// written; version 1 (without the RocketMQ attributes) is still read.
const messageVersion = 2

// EncodeMessage appends the neutral encoding of m (model.FormatMessage) to
// dst. Layout, little endian:
//
//	version u8 | flags u32 | born time i64 |
//	key (u32 len, bytes) | tags (u16 len, bytes) | producer (u16 len, bytes) |
//	header count u16 | count × { key (u16 len, bytes) | value (u32 len, bytes) } |
//	body (u32 len, bytes) |
//	user flag i32 | born host (u16 len, bytes) | reconsume times i32      (version 2)
func EncodeMessage(dst []byte, m *model.Message) []byte {
	dst = slices.Grow(dst, encodedLen(m))
	le := binary.LittleEndian
	dst = append(dst, messageVersion)
	dst = le.AppendUint32(dst, m.Flags)
	dst = le.AppendUint64(dst, uint64(m.BornTime))
	dst = le.AppendUint32(dst, uint32(len(m.Key)))
	dst = append(dst, m.Key...)
	dst = le.AppendUint16(dst, uint16(len(m.Tags)))
	dst = append(dst, m.Tags...)
	dst = le.AppendUint16(dst, uint16(len(m.Producer)))
	dst = append(dst, m.Producer...)
	dst = le.AppendUint16(dst, uint16(len(m.Headers)))
	for _, h := range m.Headers {
		dst = le.AppendUint16(dst, uint16(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = le.AppendUint32(dst, uint32(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	dst = le.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	dst = le.AppendUint32(dst, uint32(m.UserFlag))
	dst = le.AppendUint16(dst, uint16(len(m.BornHost)))
	dst = append(dst, m.BornHost...)
	return le.AppendUint32(dst, uint32(m.ReconsumeTimes))
}

// encodedLen is the size EncodeMessage writes.
func encodedLen(m *model.Message) int {
	n := 1 + 4 + 8 + 4 + len(m.Key) + 2 + len(m.Tags) + 2 + len(m.Producer) + 2 + 4 + len(m.Body) + 4 + 2 + len(m.BornHost) + 4
	for _, h := range m.Headers {
		n += 2 + len(h.Key) + 4 + len(h.Value)
	}
	return n
}

type msgReader struct {
	b   []byte
	err error
}

func (r *msgReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: message field of %d bytes overruns %d", model.ErrCorruptRecord, n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *msgReader) u16() int {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int(binary.LittleEndian.Uint16(b))
}

func (r *msgReader) u32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// DecodeMessage decodes a neutral message. Byte fields alias b.
func DecodeMessage(b []byte) (model.Message, error) {
	var m model.Message
	r := &msgReader{b: b}
	v := r.take(1)
	if v == nil {
		return m, r.err
	}
	version := v[0]
	if version != 1 && version != messageVersion {
		return m, fmt.Errorf("%w: message version %d", model.ErrUnsupportedVersion, version)
	}
	m.Flags = r.u32()
	if t := r.take(8); t != nil {
		m.BornTime = int64(binary.LittleEndian.Uint64(t))
	}
	m.Key = r.take(int(r.u32()))
	m.Tags = string(r.take(r.u16()))
	m.Producer = string(r.take(r.u16()))
	n := r.u16()
	if n > 0 && n <= len(r.b)/6 { // each header takes at least 6 bytes
		m.Headers = make([]model.Header, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		k := headerKey(r.take(r.u16()))
		v := r.take(int(r.u32()))
		m.Headers = append(m.Headers, model.Header{Key: k, Value: v})
	}
	m.Body = r.take(int(r.u32()))
	if version >= 2 {
		m.UserFlag = int32(r.u32())
		m.BornHost = string(r.take(r.u16()))
		m.ReconsumeTimes = int32(r.u32())
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes after message", model.ErrCorruptRecord, len(r.b))
	}
	return m, r.err
}

// headerKey returns a header name as a string, without allocating for the
// names nearly every RocketMQ message carries.
func headerKey(b []byte) string {
	switch string(b) { // compared without a copy
	case HeaderUniqKey:
		return HeaderUniqKey
	case "WAIT":
		return "WAIT"
	case "MSG_REGION":
		return "MSG_REGION"
	case "TRACE_ON":
		return "TRACE_ON"
	case "CONSUME_START_TIME":
		return "CONSUME_START_TIME"
	case "RETRY_TOPIC":
		return "RETRY_TOPIC"
	case "ORIGIN_MESSAGE_ID":
		return "ORIGIN_MESSAGE_ID"
	}
	return string(b)
}

// maxInflatedBody bounds what a compressed body may inflate to.
const maxInflatedBody = 64 << 20

// PlainBody returns m's body, inflated when its producer sent it
// zlib-compressed (for readers of other protocols).
func PlainBody(m *model.Message) ([]byte, error) {
	if m.Flags&model.FlagCompressedBody == 0 {
		return m.Body, nil
	}
	zr, err := zlib.NewReader(bytes.NewReader(m.Body))
	if err != nil {
		return nil, fmt.Errorf("%w: zlib body: %v", model.ErrCorruptRecord, err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, maxInflatedBody+1))
	if err != nil || len(out) > maxInflatedBody {
		return nil, fmt.Errorf("%w: zlib body: %v", model.ErrCorruptRecord, err)
	}
	return out, nil
}

// messageRecord fills r with m in the neutral format, its keys and tag hash
// (m's born time defaults to now). The record's timestamp — what time
// lookups and time retention go by — is the store time, as RocketMQ's
// lookups and file retention use it: a message delivered days after it
// was born (a timer) or by a producer whose clock is off is kept for the
// full retention from when it was stored. The born time stays in the
// message.
func messageRecord(r *storage.Record, m *model.Message, now int64) {
	messageRecordIn(r, m, now, nil)
}

// recordArena holds the encodings and keys of several records in a few
// shared allocations (what one batch of sends stores).
type recordArena struct {
	payload  []byte
	keys     []storage.Key
	keyBytes []byte
}

// newRecordArena makes an arena of the given capacities.
func newRecordArena(payload, keys, keyBytes int) *recordArena {
	return &recordArena{payload: make([]byte, 0, payload), keys: make([]storage.Key, 0, keys), keyBytes: make([]byte, 0, keyBytes)}
}

// messageRecordIn is messageRecord taking its bytes from a (nil: their
// own allocations).
func messageRecordIn(r *storage.Record, m *model.Message, now int64, a *recordArena) {
	if m.BornTime == 0 {
		m.BornTime = now
	}
	if a == nil {
		*r = storage.Record{Format: model.FormatMessage, Count: 1, Timestamp: now, Payload: EncodeMessage(nil, m)}
		if len(m.Key) > 0 {
			r.Keys = []storage.Key{{Key: m.Key}}
		}
		for _, k := range m.IndexKeys {
			if k != "" && k != string(m.Key) {
				r.Keys = append(r.Keys, storage.Key{Key: []byte(k)})
			}
		}
	} else {
		start := len(a.payload)
		a.payload = EncodeMessage(a.payload, m)
		*r = storage.Record{Format: model.FormatMessage, Count: 1, Timestamp: now, Payload: a.payload[start:len(a.payload):len(a.payload)]}
		first := len(a.keys)
		if len(m.Key) > 0 {
			a.keys = append(a.keys, storage.Key{Key: m.Key})
		}
		for _, k := range m.IndexKeys {
			if k != "" && k != string(m.Key) {
				b := len(a.keyBytes)
				a.keyBytes = append(a.keyBytes, k...)
				a.keys = append(a.keys, storage.Key{Key: a.keyBytes[b:len(a.keyBytes):len(a.keyBytes)]})
			}
		}
		if len(a.keys) > first {
			r.Keys = a.keys[first:len(a.keys):len(a.keys)]
		}
	}
	if m.Tags != "" {
		r.TagHash = TagHash(m.Tags)
	}
}
