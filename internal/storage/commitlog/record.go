package commitlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/rosettamq/rosetta/internal/model"
)

// FormatVersion is the record format this package writes and the newest it reads.
const FormatVersion = 1

// HeaderSize is the fixed size of a record header.
const HeaderSize = 72

const keyEntryOverhead = 6 // u32 offset delta + u16 length

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded fixed part of a record.
type Header struct {
	Length     uint32
	CRC        uint32
	Version    uint8
	Format     model.PayloadFormat
	Flags      uint16
	Queue      model.QueueID
	Term       model.Term
	Index      model.Index
	BaseOffset model.QueueOffset
	Count      uint32
	KeysLen    uint32
	Timestamp  int64
	StoreTime  int64
	TagHash    uint64

	// Encode-time hint, never stored: when TailFrom > 8, TailCRC is the
	// CRC-32C of payload[TailFrom:], already verified by the caller, and the
	// record's checksum is combined from it instead of reading those bytes
	// again.
	TailFrom int
	TailCRC  uint32
}

// Key is one message key or unique id of a record, at an offset delta from
// the record's base offset.
type Key struct {
	Delta uint32
	Key   []byte
}

// Record is a decoded record. Keys and Payload alias the input bytes.
type Record struct {
	Header
	Keys    []byte // the raw keys block; iterate with EachKey
	Payload []byte
	// Pos is where the record lies and Segment the base of the segment
	// holding it (set by reads and recovery scans; not encoded).
	Pos     model.LogPos
	Segment model.LogPos
}

// Len returns the encoded size of a record with these keys and payload.
func Len(keys []Key, payloadLen int) int {
	return HeaderSize + KeysLen(keys) + payloadLen
}

// KeysLen returns the encoded size of a keys block.
func KeysLen(keys []Key) int {
	n := 0
	for _, k := range keys {
		n += keyEntryOverhead + len(k.Key)
	}
	return n
}

// Encode writes a record into dst, which must be exactly Len(keys,
// len(payload)) bytes long, fills in Length, KeysLen and CRC, and returns the
// CRC.
func Encode(dst []byte, h *Header, keys []Key, payload []byte) uint32 {
	h.Length = uint32(len(dst))
	p := encodePrefix(dst, h, keys)
	copy(dst[p:], payload)
	patchHead(dst[p:], h, len(payload))
	if h.TailFrom > 8 && h.TailFrom <= len(payload) {
		crc := crc32.Update(0, castagnoli, dst[8:p+h.TailFrom])
		h.CRC = crcCombine(crc, h.TailCRC, int64(len(payload)-h.TailFrom))
	} else {
		h.CRC = crc32.Checksum(dst[8:], castagnoli)
	}
	encodeSuffix(dst, h)
	return h.CRC
}

// HeadLen is the size EncodeHead writes: header, keys, and the payload's
// patched base offset when it carries one.
func HeadLen(h *Header, keys []Key, payload []byte) int {
	return HeaderSize + KeysLen(keys) + patchedLen(h, len(payload))
}

// patchedLen is how many leading payload bytes the log rewrites.
func patchedLen(h *Header, payloadLen int) int {
	switch {
	case h.Flags&FlagPayloadOffset == 0 || payloadLen < 8:
		return 0
	case payloadLen < 16:
		return 8
	}
	return 16
}

// patchHead writes the base offset (and leader epoch) into the first
// patchedLen bytes of dst, which already hold the payload's own.
func patchHead(dst []byte, h *Header, payloadLen int) {
	n := patchedLen(h, payloadLen)
	if n >= 8 {
		binary.BigEndian.PutUint64(dst, uint64(h.BaseOffset))
	}
	if n == 16 {
		binary.BigEndian.PutUint32(dst[12:], uint32(h.Term.LeaderEpoch()))
	}
}

// EncodeHead writes a record's header and keys (and its patched base
// offset, see HeadLen) into dst for a record whose payload is written
// separately from the caller's memory; it returns the part of the payload
// that must follow dst on disk. The CRC covers the whole record.
func EncodeHead(dst []byte, h *Header, keys []Key, payload []byte) []byte {
	h.Length = uint32(HeaderSize + KeysLen(keys) + len(payload))
	p := encodePrefix(dst, h, keys)
	n := patchedLen(h, len(payload))
	copy(dst[p:p+n], payload)
	patchHead(dst[p:p+n], h, len(payload))
	p += n
	rest := payload[n:]
	crc := crc32.Update(0, castagnoli, dst[8:p])
	skip := len(payload) - len(rest)
	if h.TailFrom > skip && h.TailFrom <= len(payload) {
		crc = crc32.Update(crc, castagnoli, payload[skip:h.TailFrom])
		h.CRC = crcCombine(crc, h.TailCRC, int64(len(payload)-h.TailFrom))
	} else {
		h.CRC = crc32.Update(crc, castagnoli, rest)
	}
	encodeSuffix(dst, h)
	return rest
}

// encodePrefix writes the fixed header fields (all but length and CRC) and
// the keys block, and returns where the payload begins.
func encodePrefix(dst []byte, h *Header, keys []Key) int {
	h.KeysLen = uint32(KeysLen(keys))
	h.Version = FormatVersion
	le := binary.LittleEndian
	dst[8] = h.Version
	dst[9] = byte(h.Format)
	le.PutUint16(dst[10:], h.Flags)
	le.PutUint32(dst[12:], uint32(h.Queue))
	le.PutUint64(dst[16:], uint64(h.Term))
	le.PutUint64(dst[24:], uint64(h.Index))
	le.PutUint64(dst[32:], uint64(h.BaseOffset))
	le.PutUint32(dst[40:], h.Count)
	le.PutUint32(dst[44:], h.KeysLen)
	le.PutUint64(dst[48:], uint64(h.Timestamp))
	le.PutUint64(dst[56:], uint64(h.StoreTime))
	le.PutUint64(dst[64:], h.TagHash)
	p := HeaderSize
	for _, k := range keys {
		le.PutUint32(dst[p:], k.Delta)
		le.PutUint16(dst[p+4:], uint16(len(k.Key)))
		p += keyEntryOverhead
		p += copy(dst[p:], k.Key)
	}
	return p
}

// encodeSuffix writes the CRC and, last, the length.
func encodeSuffix(dst []byte, h *Header) {
	binary.LittleEndian.PutUint32(dst[4:], h.CRC)
	binary.LittleEndian.PutUint32(dst[0:], h.Length)
}

// AppendRecord appends an encoded record to dst.
func AppendRecord(dst []byte, h *Header, keys []Key, payload []byte) []byte {
	n := Len(keys, len(payload))
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	Encode(dst[start:], h, keys, payload)
	return dst
}

// ErrEnd is returned by Decode when b starts with a zero length: the end of
// the data in a segment.
var ErrEnd = fmt.Errorf("end of log data")

// DecodeHeader decodes and bounds-checks the fixed header at the start of b
// without verifying the checksum.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < 4 {
		return h, fmt.Errorf("%w: %d bytes is shorter than a length", model.ErrCorruptRecord, len(b))
	}
	le := binary.LittleEndian
	h.Length = le.Uint32(b)
	if h.Length == 0 {
		return h, ErrEnd
	}
	if h.Length < HeaderSize || int64(h.Length) > int64(len(b)) {
		return h, fmt.Errorf("%w: length %d with %d bytes available", model.ErrCorruptRecord, h.Length, len(b))
	}
	h.CRC = le.Uint32(b[4:])
	h.Version = b[8]
	if h.Version != FormatVersion {
		return h, fmt.Errorf("%w: record version %d", model.ErrUnsupportedVersion, h.Version)
	}
	h.Format = model.PayloadFormat(b[9])
	h.Flags = le.Uint16(b[10:])
	h.Queue = model.QueueID(le.Uint32(b[12:]))
	h.Term = model.Term(le.Uint64(b[16:]))
	h.Index = model.Index(le.Uint64(b[24:]))
	h.BaseOffset = model.QueueOffset(le.Uint64(b[32:]))
	h.Count = le.Uint32(b[40:])
	h.KeysLen = le.Uint32(b[44:])
	h.Timestamp = int64(le.Uint64(b[48:]))
	h.StoreTime = int64(le.Uint64(b[56:]))
	h.TagHash = le.Uint64(b[64:])
	if uint64(h.KeysLen) > uint64(h.Length-HeaderSize) {
		return h, fmt.Errorf("%w: keys block %d exceeds record", model.ErrCorruptRecord, h.KeysLen)
	}
	if h.BaseOffset < 0 {
		return h, fmt.Errorf("%w: negative base offset", model.ErrCorruptRecord)
	}
	return h, nil
}

// Decode decodes the record at the start of b and verifies its checksum and
// keys block. The returned slices alias b.
func Decode(b []byte) (Record, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return Record{Header: h}, err
	}
	if got := crc32.Checksum(b[8:h.Length], castagnoli); got != h.CRC {
		return Record{Header: h}, fmt.Errorf("%w: crc %08x, stored %08x", model.ErrCorruptRecord, got, h.CRC)
	}
	r := Record{
		Header:  h,
		Keys:    b[HeaderSize : HeaderSize+h.KeysLen],
		Payload: b[HeaderSize+h.KeysLen : h.Length],
	}
	if err := r.EachKey(func(Key) {}); err != nil {
		return Record{Header: h}, err
	}
	if h.Flags&FlagPayloadOffset != 0 && (len(r.Payload) < 8 || int64(binary.BigEndian.Uint64(r.Payload)) != int64(h.BaseOffset)) {
		return Record{Header: h}, fmt.Errorf("%w: payload base offset differs from the header's", model.ErrCorruptRecord)
	}
	return r, nil
}

// EachKey calls fn for each key in the record's keys block.
func (r *Record) EachKey(fn func(Key)) error {
	return eachKey(r.Keys, r.Count, fn)
}

func eachKey(b []byte, count uint32, fn func(Key)) error {
	for len(b) > 0 {
		if len(b) < keyEntryOverhead {
			return fmt.Errorf("%w: truncated key entry", model.ErrCorruptRecord)
		}
		delta := binary.LittleEndian.Uint32(b)
		n := int(binary.LittleEndian.Uint16(b[4:]))
		if len(b) < keyEntryOverhead+n {
			return fmt.Errorf("%w: key of %d bytes overruns block", model.ErrCorruptRecord, n)
		}
		if delta >= count && count > 0 {
			return fmt.Errorf("%w: key delta %d beyond count %d", model.ErrCorruptRecord, delta, count)
		}
		fn(Key{Delta: delta, Key: b[keyEntryOverhead : keyEntryOverhead+n]})
		b = b[keyEntryOverhead+n:]
	}
	return nil
}
