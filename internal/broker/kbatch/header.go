package kbatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// HeaderSize is the fixed part of a record batch.
const HeaderSize = 61

// CRCFrom is where the bytes covered by a batch's CRC begin.
const CRCFrom = 21

// Attribute bits.
const (
	AttrCompressionMask = 0x07
	AttrLogAppendTime   = 0x08
	AttrTransactional   = 0x10
	AttrControl         = 0x20
)

// Compression codecs (attributes & AttrCompressionMask).
const (
	CodecNone   = 0
	CodecGzip   = 1
	CodecSnappy = 2
	CodecLZ4    = 3
	CodecZstd   = 4
)

// CRC32C is the Castagnoli table batches are checksummed with.
var CRC32C = crc32.MakeTable(crc32.Castagnoli)

// Header is the fixed header of a record batch.
type Header struct {
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

// Codec is the batch's compression codec.
func (h *Header) Codec() int { return int(h.Attributes & AttrCompressionMask) }

// LastSequence is the sequence number of the batch's last record.
func (h *Header) LastSequence() int32 { return h.BaseSequence + h.LastOffsetDelta }

// ReadHeader decodes the header at the start of b, which must hold at least
// HeaderSize bytes.
func ReadHeader(b []byte) Header {
	be := binary.BigEndian
	return Header{
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

// Error is a produced payload that is not a valid batch.
type Error struct {
	Reason      string
	Corrupt     bool // CORRUPT_MESSAGE rather than INVALID_RECORD
	Unsupported bool // an old message format (magic 0 or 1)
}

func (e *Error) Error() string { return "kafka record batch: " + e.Reason }

// Split validates the record batches of one produced partition and returns
// each batch's bytes and header. It checks framing, magic, the CRC, the
// record count and the codec; it never decompresses.
func Split(b []byte) ([][]byte, []Header, error) {
	var out [][]byte
	var hs []Header
	for len(b) > 0 {
		if len(b) < HeaderSize {
			return nil, nil, &Error{Reason: fmt.Sprintf("%d trailing bytes are not a record batch", len(b)), Corrupt: true}
		}
		h := ReadHeader(b)
		if h.Magic != 2 {
			return nil, nil, &Error{Reason: fmt.Sprintf("record batch magic %d: only magic 2 is supported", h.Magic), Unsupported: true}
		}
		total := int64(h.Length) + 12
		if h.Length < HeaderSize-12 || total > int64(len(b)) {
			return nil, nil, &Error{Reason: fmt.Sprintf("batch length %d with %d bytes", h.Length, len(b)), Corrupt: true}
		}
		batch := b[:total]
		if crc32.Checksum(batch[CRCFrom:], CRC32C) != h.CRC {
			return nil, nil, &Error{Reason: "record batch CRC mismatch", Corrupt: true}
		}
		if h.NumRecords <= 0 || h.LastOffsetDelta != h.NumRecords-1 {
			return nil, nil, &Error{Reason: fmt.Sprintf("batch with %d records and last offset delta %d", h.NumRecords, h.LastOffsetDelta)}
		}
		if h.Codec() > CodecZstd {
			return nil, nil, &Error{Reason: fmt.Sprintf("unknown compression codec %d", h.Codec())}
		}
		out = append(out, batch)
		hs = append(hs, h)
		b = b[total:]
	}
	if len(out) == 0 {
		return nil, nil, &Error{Reason: "no record batch", Corrupt: true}
	}
	return out, hs, nil
}
