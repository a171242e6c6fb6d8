package protocol

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Message property separators (RocketMQ MessageDecoder).
const (
	nameValueSep = '\x01'
	propertySep  = '\x02'
)

// Sysflag bits that concern the wire layout.
const (
	SysFlagCompressed  = 0x1
	SysFlagBornHostV6  = 0x10
	SysFlagStoreHostV6 = 0x20
)

// Magic codes of stored messages.
const (
	MagicV1 = 0xDAA320A7 // -626843481 as a Java int
)

// Property is one message property.
type Property struct{ Key, Value string }

// ParseProperties splits "k\x01v\x02k\x01v\x02…" into properties, in order.
func ParseProperties(s string) []Property { return ParsePropertiesTo(nil, s) }

// ParsePropertiesTo is ParseProperties appending to out (room the caller
// has spares an allocation).
func ParsePropertiesTo(out []Property, s string) []Property {
	for len(s) > 0 {
		var item string
		if i := strings.IndexByte(s, propertySep); i >= 0 {
			item, s = s[:i], s[i+1:]
		} else {
			item, s = s, ""
		}
		if k, v, ok := strings.Cut(item, string(nameValueSep)); ok && k != "" {
			out = append(out, Property{k, v})
		}
	}
	return out
}

// AppendProperty appends the wire form of one property.
func AppendProperty[V string | []byte](dst []byte, key string, value V) []byte {
	dst = append(dst, key...)
	dst = append(dst, nameValueSep)
	dst = append(dst, value...)
	return append(dst, propertySep)
}

// AppendProperties appends the wire form of props.
func AppendProperties(dst []byte, props []Property) []byte {
	for _, p := range props {
		dst = append(dst, p.Key...)
		dst = append(dst, nameValueSep)
		dst = append(dst, p.Value...)
		dst = append(dst, propertySep)
	}
	return dst
}

// StoredMessage is a message as a pull response (or a query) carries it.
type StoredMessage struct {
	QueueID                   int32
	Flag                      int32
	QueueOffset               int64
	PhysicalOffset            int64
	SysFlag                   int32
	BornTimestamp             int64
	BornHost                  string // host:port
	StoreTimestamp            int64
	StoreHost                 string // host:port
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
	Body                      []byte
	Topic                     string
	Properties                []byte // wire form
}

// appendHost appends an address as IPv4 (4 bytes) or IPv6 (16) plus a
// 4-byte port, and reports whether it was IPv6.
func appendHost(dst []byte, hostport string) ([]byte, bool) {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		// The common case, parsed without allocating.
		a := ap.Addr().Unmap()
		if a.Is4() {
			b := a.As4()
			dst = append(dst, b[:]...)
		} else {
			b := a.As16()
			dst = append(dst, b[:]...)
		}
		return binary.BigEndian.AppendUint32(dst, uint32(ap.Port())), !a.Is4()
	}
	host, port, err := net.SplitHostPort(hostport)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		ip = net.IPv4(127, 0, 0, 1)
	}
	p, _ := strconv.Atoi(port)
	v6 := ip.To4() == nil
	if v6 {
		dst = append(dst, ip.To16()...)
	} else {
		dst = append(dst, ip.To4()...)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(p)), v6
}

// AppendStoredV1 appends m in the stored-message layout version 1 (the one
// every client decodes: a 1-byte topic length).
func AppendStoredV1(dst []byte, m *StoredMessage) []byte {
	be := binary.BigEndian
	start := len(dst)
	dst = be.AppendUint32(dst, 0) // total size, set below
	dst = be.AppendUint32(dst, uint32(MagicV1))
	dst = be.AppendUint32(dst, crc32.ChecksumIEEE(m.Body)&0x7FFFFFFF)
	dst = be.AppendUint32(dst, uint32(m.QueueID))
	dst = be.AppendUint32(dst, uint32(m.Flag))
	dst = be.AppendUint64(dst, uint64(m.QueueOffset))
	dst = be.AppendUint64(dst, uint64(m.PhysicalOffset))
	sysAt := len(dst)
	dst = be.AppendUint32(dst, 0) // sysflag, set below with the host bits
	dst = be.AppendUint64(dst, uint64(m.BornTimestamp))
	var bornV6, storeV6 bool
	dst, bornV6 = appendHost(dst, m.BornHost)
	dst = be.AppendUint64(dst, uint64(m.StoreTimestamp))
	dst, storeV6 = appendHost(dst, m.StoreHost)
	dst = be.AppendUint32(dst, uint32(m.ReconsumeTimes))
	dst = be.AppendUint64(dst, uint64(m.PreparedTransactionOffset))
	dst = be.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	topic := m.Topic
	if len(topic) > 127 {
		topic = topic[:127] // V1 holds a signed 1-byte length
	}
	dst = append(dst, byte(len(topic)))
	dst = append(dst, topic...)
	dst = be.AppendUint16(dst, uint16(len(m.Properties)))
	dst = append(dst, m.Properties...)
	sys := m.SysFlag &^ (SysFlagBornHostV6 | SysFlagStoreHostV6)
	if bornV6 {
		sys |= SysFlagBornHostV6
	}
	if storeV6 {
		sys |= SysFlagStoreHostV6
	}
	be.PutUint32(dst[sysAt:], uint32(sys))
	be.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst
}

// BatchMessage is one message of a SEND_BATCH_MESSAGE body.
type BatchMessage struct {
	Flag       int32
	Body       []byte
	Properties string
}

// DecodeBatch splits a batch body: repeated { total size i32 | magic i32 |
// body crc i32 | flag i32 | body length i32 | body | properties length i16 |
// properties }. Bodies alias b.
func DecodeBatch(b []byte) ([]BatchMessage, error) {
	be := binary.BigEndian
	var out []BatchMessage
	for len(b) > 0 {
		if len(b) < 20 {
			return nil, fmt.Errorf("%w: %d trailing batch bytes", ErrMalformed, len(b))
		}
		total := int(int32(be.Uint32(b)))
		if total < 22 || total > len(b) {
			return nil, fmt.Errorf("%w: batch message of %d bytes in %d", ErrMalformed, total, len(b))
		}
		msg := b[:total]
		flag := int32(be.Uint32(msg[12:]))
		bodyLen := int(int32(be.Uint32(msg[16:])))
		if bodyLen < 0 || 20+bodyLen+2 > total {
			return nil, fmt.Errorf("%w: batch body of %d bytes", ErrMalformed, bodyLen)
		}
		body := msg[20 : 20+bodyLen : 20+bodyLen]
		propLen := int(be.Uint16(msg[20+bodyLen:]))
		if 22+bodyLen+propLen > total {
			return nil, fmt.Errorf("%w: batch properties of %d bytes", ErrMalformed, propLen)
		}
		out = append(out, BatchMessage{Flag: flag, Body: body, Properties: string(msg[22+bodyLen : 22+bodyLen+propLen])})
		b = b[total:]
	}
	return out, nil
}

// OffsetMessageID is the broker-assigned message id: the store host's
// address and port, then a 64-bit position, in upper-case hex.
func OffsetMessageID(storeHost string, position int64) string {
	return OffsetMessageIDPrefix(storeHost).ID(position)
}

// MessageIDPrefix is the host part of offset message ids, encoded once
// for the many ids one connection answers.
type MessageIDPrefix string

// OffsetMessageIDPrefix encodes storeHost's part of offset message ids.
func OffsetMessageIDPrefix(storeHost string) MessageIDPrefix {
	b, _ := appendHost(nil, storeHost)
	return MessageIDPrefix(strings.ToUpper(hex.EncodeToString(b)))
}

// ID is the offset message id of a position stored on this host.
func (p MessageIDPrefix) ID(position int64) string {
	const digits = "0123456789ABCDEF"
	b := make([]byte, len(p)+16)
	copy(b, p)
	for i := 0; i < 16; i++ {
		b[len(b)-1-i] = digits[uint64(position)>>(4*i)&0xF]
	}
	return string(b)
}

// ParseOffsetMessageID returns the position an offset message id carries.
func ParseOffsetMessageID(id string) (int64, error) {
	b, err := hex.DecodeString(id)
	if err != nil || (len(b) != 16 && len(b) != 28) {
		return 0, fmt.Errorf("%w: message id %q", ErrMalformed, id)
	}
	return int64(binary.BigEndian.Uint64(b[len(b)-8:])), nil
}
