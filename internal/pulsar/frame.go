// Package pulsar is the Pulsar binary protocol front-end: the frame codec
// (this file), connections, lookups, producers, subscriptions and the
// admin REST subset. Frames, as pulsar-client-go reads and writes them
// (big-endian):
//
//	simple:  totalSize u32 | cmdSize u32 | BaseCommand
//	payload: totalSize u32 | cmdSize u32 | BaseCommand
//	         [ 0x0e02 u16 | size u32 | BrokerEntryMetadata ]  (MESSAGE only, when asked for)
//	         0x0e01 u16 | CRC32C u32 | metadataSize u32 | MessageMetadata | payload
//
// totalSize counts everything after itself; the checksum covers
// everything from metadataSize to the frame's end.
package pulsar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// Frame limits, as the clients have them: a message of at most 5 MiB,
// with room for its command and metadata.
const (
	MaxMessageSize = 5 << 20
	MaxFrameSize   = MaxMessageSize + 10<<10

	magicChecksum      = 0x0e01
	magicBrokerEntries = 0x0e02
)

// ErrBadFrame is a frame that does not decode; ErrChecksum one whose
// payload checksum does not match.
var (
	ErrBadFrame = errors.New("pulsar: malformed frame")
	ErrChecksum = fmt.Errorf("%w: payload checksum mismatch", ErrBadFrame)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame is one decoded frame: its command and, for SEND and MESSAGE, the
// message metadata and payload (aliasing the frame's bytes).
type Frame struct {
	Command      *pulsarpb.BaseCommand
	Metadata     *pulsarpb.MessageMetadata // nil for a simple frame
	BrokerEntry  *pulsarpb.BrokerEntryMetadata
	Payload      []byte
	ChecksumSeen bool // the payload carried a checksum block
}

// DecodeFrame decodes one frame from b, the totalSize bytes that follow
// its size field.
func DecodeFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) < 4 {
		return f, fmt.Errorf("%w: %d bytes", ErrBadFrame, len(b))
	}
	cmdSize := binary.BigEndian.Uint32(b)
	if uint64(cmdSize) > uint64(len(b)-4) {
		return f, fmt.Errorf("%w: command of %d bytes in a frame of %d", ErrBadFrame, cmdSize, len(b))
	}
	f.Command = &pulsarpb.BaseCommand{}
	if err := proto.Unmarshal(b[4:4+cmdSize], f.Command); err != nil {
		return f, fmt.Errorf("%w: command: %w", ErrBadFrame, err)
	}
	rest := b[4+cmdSize:]
	if len(rest) == 0 {
		return f, nil
	}
	if len(rest) >= 6 && binary.BigEndian.Uint16(rest) == magicBrokerEntries {
		size := binary.BigEndian.Uint32(rest[2:])
		if uint64(size) > uint64(len(rest)-6) {
			return f, fmt.Errorf("%w: broker entry metadata of %d bytes", ErrBadFrame, size)
		}
		f.BrokerEntry = &pulsarpb.BrokerEntryMetadata{}
		if err := proto.Unmarshal(rest[6:6+size], f.BrokerEntry); err != nil {
			return f, fmt.Errorf("%w: broker entry metadata: %w", ErrBadFrame, err)
		}
		rest = rest[6+size:]
	}
	if len(rest) >= 6 && binary.BigEndian.Uint16(rest) == magicChecksum {
		sum := binary.BigEndian.Uint32(rest[2:])
		rest = rest[6:]
		if crc32.Checksum(rest, castagnoli) != sum {
			return f, ErrChecksum
		}
		f.ChecksumSeen = true
	}
	if len(rest) < 4 {
		return f, fmt.Errorf("%w: %d bytes where message metadata begins", ErrBadFrame, len(rest))
	}
	mdSize := binary.BigEndian.Uint32(rest)
	if uint64(mdSize) > uint64(len(rest)-4) {
		return f, fmt.Errorf("%w: message metadata of %d bytes", ErrBadFrame, mdSize)
	}
	f.Metadata = &pulsarpb.MessageMetadata{}
	if err := proto.Unmarshal(rest[4:4+mdSize], f.Metadata); err != nil {
		return f, fmt.Errorf("%w: message metadata: %w", ErrBadFrame, err)
	}
	f.Payload = rest[4+mdSize:]
	return f, nil
}

// AppendCommand appends a simple frame holding cmd.
func AppendCommand(dst []byte, cmd *pulsarpb.BaseCommand) ([]byte, error) {
	c, err := proto.Marshal(cmd)
	if err != nil {
		return dst, err
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(c)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c)))
	return append(dst, c...), nil
}

// AppendPayloadCommand appends a payload frame: cmd, then (when entry is
// set) the broker entry metadata, then the checksummed message metadata
// and payload.
func AppendPayloadCommand(dst []byte, cmd *pulsarpb.BaseCommand, entry *pulsarpb.BrokerEntryMetadata, md *pulsarpb.MessageMetadata, payload []byte) ([]byte, error) {
	c, err := proto.Marshal(cmd)
	if err != nil {
		return dst, err
	}
	var e []byte
	if entry != nil {
		if e, err = proto.Marshal(entry); err != nil {
			return dst, err
		}
	}
	m, err := proto.Marshal(md)
	if err != nil {
		return dst, err
	}
	total := 4 + len(c) + 6 + 4 + len(m) + len(payload)
	if entry != nil {
		total += 6 + len(e)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c)))
	dst = append(dst, c...)
	if entry != nil {
		dst = binary.BigEndian.AppendUint16(dst, magicBrokerEntries)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(e)))
		dst = append(dst, e...)
	}
	dst = binary.BigEndian.AppendUint16(dst, magicChecksum)
	sumAt := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	from := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m)))
	dst = append(dst, m...)
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[sumAt:], crc32.Checksum(dst[from:], castagnoli))
	return dst, nil
}
