package kbatch

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
)

// NewRecord is one record for Build: a nil Key is a null key, a nil Value
// (with ValueNull) a tombstone.
type NewRecord struct {
	Timestamp int64
	Key       []byte
	Value     []byte
	ValueNull bool
	Headers   []RecordHeader
}

// Build encodes records as one non-transactional record batch (magic 2,
// no producer id) compressed with codec, at base offset 0 (storage writes
// the assigned one). Other protocols' producers store their batches in
// this format, so Kafka consumers read them as they are.
func (rd *Reader) Build(codec int, records []NewRecord) ([]byte, error) {
	first, maxTS := int64(0), int64(0)
	size := 0
	for i := range records {
		r := &records[i]
		if i == 0 {
			first = r.Timestamp
		}
		maxTS = max(maxTS, r.Timestamp)
		n := recordSize(int32(i), r.Timestamp-first, r)
		size += varintLen(int64(n)) + n
	}
	// Uncompressed records go straight after the header; others are
	// encoded, then compressed there.
	out := make([]byte, HeaderSize, HeaderSize+size)
	raw := out
	if codec != CodecNone {
		raw = make([]byte, 0, size)
	}
	for i := range records {
		r := &records[i]
		raw = appendRecord(raw, int32(i), r.Timestamp-first, r)
	}
	if codec == CodecNone {
		out = raw
	} else {
		body, err := rd.compressRecords(codec, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, body...)
	}
	be := binary.BigEndian
	be.PutUint64(out[0:], 0)
	be.PutUint32(out[8:], uint32(len(out)-12))
	be.PutUint32(out[12:], 0xffffffff) // partition leader epoch: none
	out[16] = 2
	be.PutUint16(out[21:], uint16(codec))
	be.PutUint32(out[23:], uint32(len(records)-1))
	be.PutUint64(out[27:], uint64(first))
	be.PutUint64(out[35:], uint64(maxTS))
	be.PutUint64(out[43:], 0xffffffffffffffff) // producer id -1
	be.PutUint16(out[51:], 0xffff)             // producer epoch -1
	be.PutUint32(out[53:], 0xffffffff)         // base sequence -1
	be.PutUint32(out[57:], uint32(len(records)))
	be.PutUint32(out[17:], crc32.Checksum(out[CRCFrom:], CRC32C))
	return out, nil
}

// varintLen is the size of x as a zig-zag varint.
func varintLen(x int64) int {
	ux := uint64(x)<<1 ^ uint64(x>>63)
	return (bits.Len64(ux|1) + 6) / 7
}

func varBytesLen(b []byte, null bool) int {
	if null {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

// recordSize is a record's encoded size after its length.
func recordSize(delta int32, tsDelta int64, r *NewRecord) int {
	n := 1 + varintLen(tsDelta) + varintLen(int64(delta)) + varBytesLen(r.Key, r.Key == nil) +
		varBytesLen(r.Value, r.ValueNull) + varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + varBytesLen(h.Value, h.Value == nil)
	}
	return n
}

// appendRecord appends one record's encoding (length varint first).
func appendRecord(dst []byte, delta int32, tsDelta int64, r *NewRecord) []byte {
	dst = binary.AppendVarint(dst, int64(recordSize(delta, tsDelta, r)))
	dst = append(dst, 0) // attributes
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(delta))
	dst = appendVarBytes(dst, r.Key, r.Key == nil)
	dst = appendVarBytes(dst, r.Value, r.ValueNull)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendVarBytes(dst, h.Value, h.Value == nil)
	}
	return dst
}

func appendVarBytes(dst, b []byte, null bool) []byte {
	if null {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
