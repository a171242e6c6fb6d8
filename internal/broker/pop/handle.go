package pop

import (
	"encoding/base64"
	"encoding/binary"
	"errors"

	"github.com/rosettamq/rosetta/internal/model"
)

// Handle names one lease of a handed-out message (a receipt handle).
type Handle struct {
	Queue    model.QueueID
	Offset   model.QueueOffset
	Gen      uint32
	Deadline int64 // ms, for clients that read it
}

// ErrBadHandle is a receipt handle that does not parse.
var ErrBadHandle = errors.New("receipt handle is not valid")

const handleVersion = 1

// String encodes the handle: base64url of version u8 | queue u32 |
// offset u64 | gen u32 | deadline u64 (big endian).
func (h Handle) String() string {
	b := make([]byte, 0, 25)
	b = append(b, handleVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(h.Queue))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Offset))
	b = binary.BigEndian.AppendUint32(b, h.Gen)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Deadline))
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseHandle decodes a receipt handle.
func ParseHandle(s string) (Handle, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 25 || b[0] != handleVersion {
		return Handle{}, ErrBadHandle
	}
	h := Handle{Queue: model.QueueID(binary.BigEndian.Uint32(b[1:])), Offset: model.QueueOffset(binary.BigEndian.Uint64(b[5:])),
		Gen: binary.BigEndian.Uint32(b[13:]), Deadline: int64(binary.BigEndian.Uint64(b[17:]))}
	if h.Offset < 0 {
		return Handle{}, ErrBadHandle
	}
	return h, nil
}
