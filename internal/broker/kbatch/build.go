package kbatch

import (
	"encoding/binary"
	"hash/crc32"
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
	var raw []byte
	first, maxTS := int64(0), int64(0)
	for i := range records {
		r := &records[i]
		if i == 0 {
			first = r.Timestamp
		}
		maxTS = max(maxTS, r.Timestamp)
		raw = appendRecord(raw, int32(i), r.Timestamp-first, r)
	}
	body, err := rd.compressRecords(codec, raw)
	if err != nil {
		return nil, err
	}
	be := binary.BigEndian
	out := make([]byte, HeaderSize, HeaderSize+len(body))
	be.PutUint64(out[0:], 0)
	be.PutUint32(out[8:], uint32(HeaderSize-12+len(body)))
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
	out = append(out, body...)
	be.PutUint32(out[17:], crc32.Checksum(out[CRCFrom:], CRC32C))
	return out, nil
}

// appendRecord appends one record's encoding (length varint first).
func appendRecord(dst []byte, delta int32, tsDelta int64, r *NewRecord) []byte {
	var body []byte
	body = append(body, 0) // attributes
	body = binary.AppendVarint(body, tsDelta)
	body = binary.AppendVarint(body, int64(delta))
	body = appendVarBytes(body, r.Key, r.Key == nil)
	body = appendVarBytes(body, r.Value, r.ValueNull)
	body = binary.AppendVarint(body, int64(len(r.Headers)))
	for _, h := range r.Headers {
		body = appendVarBytes(body, []byte(h.Key), false)
		body = appendVarBytes(body, h.Value, h.Value == nil)
	}
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

func appendVarBytes(dst, b []byte, null bool) []byte {
	if null {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
