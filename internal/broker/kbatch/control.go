package kbatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Control record types (the key's second int16).
const (
	ControlAbort  = 0
	ControlCommit = 1
)

// AppendControlBatch appends a transaction marker: a one-record control
// batch of producer pid at epoch, commit or abort, written by a coordinator
// of the given epoch at ts (ms). Its base offset is 0 (storage assigns it).
func AppendControlBatch(dst []byte, pid int64, epoch int16, commit bool, coordinatorEpoch int32, ts int64) []byte {
	typ := int16(ControlAbort)
	if commit {
		typ = ControlCommit
	}
	var rec []byte
	rec = append(rec, 0)              // attributes
	rec = binary.AppendVarint(rec, 0) // timestamp delta
	rec = binary.AppendVarint(rec, 0) // offset delta
	rec = binary.AppendVarint(rec, 4) // key: version, type
	rec = binary.BigEndian.AppendUint16(rec, 0)
	rec = binary.BigEndian.AppendUint16(rec, uint16(typ))
	rec = binary.AppendVarint(rec, 6) // value: version, coordinator epoch
	rec = binary.BigEndian.AppendUint16(rec, 0)
	rec = binary.BigEndian.AppendUint32(rec, uint32(coordinatorEpoch))
	rec = binary.AppendVarint(rec, 0) // headers

	start := len(dst)
	be := binary.BigEndian
	dst = be.AppendUint64(dst, 0) // base offset
	dst = be.AppendUint32(dst, 0) // length, below
	dst = be.AppendUint32(dst, 0) // partition leader epoch
	dst = append(dst, 2)          // magic
	dst = be.AppendUint32(dst, 0) // crc, below
	dst = be.AppendUint16(dst, AttrTransactional|AttrControl)
	dst = be.AppendUint32(dst, 0) // last offset delta
	dst = be.AppendUint64(dst, uint64(ts))
	dst = be.AppendUint64(dst, uint64(ts))
	dst = be.AppendUint64(dst, uint64(pid))
	dst = be.AppendUint16(dst, uint16(epoch))
	dst = be.AppendUint32(dst, 0xFFFFFFFF) // base sequence -1
	dst = be.AppendUint32(dst, 1)
	dst = binary.AppendVarint(dst, int64(len(rec)))
	dst = append(dst, rec...)
	b := dst[start:]
	be.PutUint32(b[8:], uint32(len(b)-12))
	be.PutUint32(b[17:], crc32.Checksum(b[CRCFrom:], CRC32C))
	return dst
}

// ControlType returns the type of a control batch's marker (ControlAbort or
// ControlCommit).
func ControlType(batch []byte) (int16, error) {
	if len(batch) < HeaderSize {
		return 0, fmt.Errorf("%w: %d bytes", ErrMalformed, len(batch))
	}
	h := ReadHeader(batch)
	if h.Attributes&AttrControl == 0 || h.NumRecords < 1 || h.Codec() != CodecNone {
		return 0, fmt.Errorf("%w: not a control batch", ErrMalformed)
	}
	d := decoder{b: batch[HeaderSize:]}
	n := d.varint()
	if d.err != nil || n < 0 || n > int64(len(d.b)) {
		return 0, fmt.Errorf("%w: control record length", ErrMalformed)
	}
	rec := decoder{b: d.b[:n]}
	rec.byte()
	rec.varint()
	rec.varint()
	key, null := rec.bytes()
	if rec.err != nil || null || len(key) < 4 {
		return 0, fmt.Errorf("%w: control record key", ErrMalformed)
	}
	return int16(binary.BigEndian.Uint16(key[2:])), nil
}
