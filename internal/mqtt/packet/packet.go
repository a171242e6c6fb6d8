// Package packet is the MQTT control packet codec, for protocol levels 3
// (3.1), 4 (3.1.1) and 5 (5.0), as the OASIS specifications define the
// packets and the Eclipse Paho clients write them. It is pure: Decode
// turns a packet's bytes into one of the packet types below and Append
// encodes one; reading packets off a connection is ReadPacket's.
//
// Every packet starts with a fixed header: a byte (the type in the high
// nibble, flags in the low one) and the remaining length, a variable
// byte integer of one to four bytes (at most 268,435,455). Strings are
// UTF-8 with a two-byte length and may not hold U+0000; binary data has a
// two-byte length too. Level 5 adds properties to most packets and reason
// codes to the acknowledgements.
package packet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Protocol levels.
const (
	V31  byte = 3 // MQTT 3.1 ("MQIsdp")
	V311 byte = 4 // MQTT 3.1.1
	V5   byte = 5 // MQTT 5.0
)

// Packet types (the fixed header's high nibble).
const (
	CONNECT     byte = 1
	CONNACK     byte = 2
	PUBLISH     byte = 3
	PUBACK      byte = 4
	PUBREC      byte = 5
	PUBREL      byte = 6
	PUBCOMP     byte = 7
	SUBSCRIBE   byte = 8
	SUBACK      byte = 9
	UNSUBSCRIBE byte = 10
	UNSUBACK    byte = 11
	PINGREQ     byte = 12
	PINGRESP    byte = 13
	DISCONNECT  byte = 14
	AUTH        byte = 15
)

// TypeName names a packet type for logs and metrics.
func TypeName(t byte) string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type%d", t)
}

var typeNames = [...]string{"", "connect", "connack", "publish", "puback", "pubrec", "pubrel", "pubcomp",
	"subscribe", "suback", "unsubscribe", "unsuback", "pingreq", "pingresp", "disconnect", "auth"}

// MaxRemainingLength is the largest remaining length a fixed header can
// carry.
const MaxRemainingLength = 268_435_455

// Packet is a decoded control packet: *Connect, *Connack, *Publish, *Ack
// (PUBACK, PUBREC, PUBREL, PUBCOMP), *Subscribe, *Suback, *Unsubscribe,
// *Unsuback, *Pingreq, *Pingresp, *Disconnect or *Auth.
type Packet interface {
	// Type is the packet's type.
	Type() byte
	// appendBody appends the variable header and payload at level v and
	// returns the fixed header's flags.
	appendBody(dst []byte, v byte) ([]byte, byte)
}

// Error is a packet that cannot be taken: Code is the level 5 reason code
// a DISCONNECT (or CONNACK, for a CONNECT) carries — malformed packet,
// protocol error, packet too large.
type Error struct {
	Code   byte
	Reason string
}

func (e *Error) Error() string { return "mqtt: " + e.Reason }

// Reason codes of packets that cannot be taken.
const (
	CodeMalformed      byte = 0x81
	CodeProtocolError  byte = 0x82
	CodeTooLarge       byte = 0x95
	CodeTopicNameBad   byte = 0x90
	CodeUnsupportedVer byte = 0x84
)

func malformed(format string, args ...any) error {
	return &Error{Code: CodeMalformed, Reason: "malformed packet: " + fmt.Sprintf(format, args...)}
}

func protocolError(format string, args ...any) error {
	return &Error{Code: CodeProtocolError, Reason: "protocol error: " + fmt.Sprintf(format, args...)}
}

// ErrTooLarge is a packet over the size the reader allows.
var ErrTooLarge = &Error{Code: CodeTooLarge, Reason: "packet too large"}

// ReadPacket reads one packet's fixed header byte and remaining bytes
// (body, a new slice) from r; a packet larger than maxSize bytes in all
// is refused with ErrTooLarge before its body is read.
func ReadPacket(r *bufio.Reader, maxSize int) (header byte, body []byte, err error) {
	header, err = r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, size, err := readLength(r)
	if err != nil {
		return 0, nil, err
	}
	if 1+size+n > maxSize {
		return header, nil, ErrTooLarge
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return header, nil, err
	}
	return header, body, nil
}

// readLength reads a remaining length: its value and how many bytes it
// took.
func readLength(r io.ByteReader) (int, int, error) {
	v, mult := 0, 1
	for i := 1; ; i++ {
		b, err := r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && i > 1 {
				err = io.ErrUnexpectedEOF
			}
			return 0, i, err
		}
		v += int(b&0x7f) * mult
		if b&0x80 == 0 {
			if i > 1 && b == 0 {
				return 0, i, malformed("remaining length not in its shortest form")
			}
			return v, i, nil
		}
		if i == 4 {
			return 0, i, malformed("remaining length over four bytes")
		}
		mult *= 128
	}
}

// appendVarint appends a variable byte integer.
func appendVarint(dst []byte, v int) []byte {
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v > 0 {
			dst = append(dst, b|0x80)
			continue
		}
		return append(dst, b)
	}
}

// varintSize is a variable byte integer's size.
func varintSize(v int) int {
	n := 1
	for v >= 128 {
		v >>= 7
		n++
	}
	return n
}

// Append encodes p at protocol level v after dst.
func Append(dst []byte, v byte, p Packet) []byte {
	// The body goes after room for the longest fixed header, then moves
	// back against the header actually needed.
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst, flags := p.appendBody(dst, v)
	n := len(dst) - start - 5
	hdr := appendVarint([]byte{p.Type()<<4 | flags}, n)
	copy(dst[start:], hdr)
	copy(dst[start+len(hdr):], dst[start+5:])
	return dst[:start+len(hdr)+n]
}

// Decode decodes a packet at protocol level v (a CONNECT at any level:
// it names the level) from its fixed header byte and remaining bytes.
// Strings and binary fields alias body. A CONNECT of an unsupported level
// comes back with its error (code CodeUnsupportedVer), to be answered.
func Decode(v byte, header byte, body []byte) (Packet, error) {
	t, flags := header>>4, header&0x0f
	switch t {
	case PUBLISH:
		return decodePublish(v, flags, body)
	case PUBREL, SUBSCRIBE, UNSUBSCRIBE:
		if flags != 0b0010 {
			return nil, malformed("%s flags %04b, want 0010", TypeName(t), flags)
		}
	default:
		if flags != 0 {
			return nil, malformed("%s flags %04b, want 0", TypeName(t), flags)
		}
	}
	d := &decoder{b: body}
	var p Packet
	var err error
	switch t {
	case CONNECT:
		p, err = decodeConnect(d)
	case CONNACK:
		p, err = decodeConnack(v, d)
	case PUBACK, PUBREC, PUBREL, PUBCOMP:
		p, err = decodeAck(v, t, d)
	case SUBSCRIBE:
		p, err = decodeSubscribe(v, d)
	case SUBACK:
		p, err = decodeSuback(v, d)
	case UNSUBSCRIBE:
		p, err = decodeUnsubscribe(v, d)
	case UNSUBACK:
		p, err = decodeUnsuback(v, d)
	case PINGREQ:
		p = &Pingreq{}
	case PINGRESP:
		p = &Pingresp{}
	case DISCONNECT:
		p, err = decodeDisconnect(v, d)
	case AUTH:
		if v != V5 {
			return nil, protocolError("AUTH before MQTT 5")
		}
		p, err = decodeAuth(d)
	default:
		return nil, malformed("packet type %d", t)
	}
	if err != nil {
		if c, ok := p.(*Connect); ok && c != nil {
			return c, err // an unsupported level: the CONNECT says which, to answer it
		}
		return nil, err
	}
	if len(d.b) > 0 {
		return nil, malformed("%d bytes after %s", len(d.b), TypeName(t))
	}
	return p, nil
}

// decoder reads a packet's fields.
type decoder struct{ b []byte }

func (d *decoder) byte() (byte, error) {
	if len(d.b) < 1 {
		return 0, malformed("truncated")
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v, nil
}

func (d *decoder) uint16() (uint16, error) {
	if len(d.b) < 2 {
		return 0, malformed("truncated")
	}
	v := uint16(d.b[0])<<8 | uint16(d.b[1])
	d.b = d.b[2:]
	return v, nil
}

func (d *decoder) uint32() (uint32, error) {
	if len(d.b) < 4 {
		return 0, malformed("truncated")
	}
	v := uint32(d.b[0])<<24 | uint32(d.b[1])<<16 | uint32(d.b[2])<<8 | uint32(d.b[3])
	d.b = d.b[4:]
	return v, nil
}

func (d *decoder) varint() (int, error) {
	v, mult := 0, 1
	for i := range 4 {
		if len(d.b) == 0 {
			return 0, malformed("truncated variable byte integer")
		}
		b := d.b[0]
		d.b = d.b[1:]
		v += int(b&0x7f) * mult
		if b&0x80 == 0 {
			if i > 0 && b == 0 {
				return 0, malformed("variable byte integer not in its shortest form")
			}
			return v, nil
		}
		mult *= 128
	}
	return 0, malformed("variable byte integer over four bytes")
}

func (d *decoder) binary() ([]byte, error) {
	n, err := d.uint16()
	if err != nil {
		return nil, err
	}
	if int(n) > len(d.b) {
		return nil, malformed("field of %d bytes in %d", n, len(d.b))
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) string() (string, error) {
	b, err := d.binary()
	if err != nil {
		return "", err
	}
	if err := ValidString(b); err != nil {
		return "", err
	}
	return string(b), nil
}

// ValidString checks a UTF-8 string field: well-formed, without U+0000
// (the specification's malformed packet).
func ValidString(b []byte) error {
	if !utf8.Valid(b) {
		return malformed("a string is not UTF-8")
	}
	for _, c := range b {
		if c == 0 {
			return malformed("a string holds U+0000")
		}
	}
	return nil
}

func appendUint16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendUint32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendBinary(dst, b []byte) []byte {
	dst = appendUint16(dst, uint16(len(b)))
	return append(dst, b...)
}

func appendString(dst []byte, s string) []byte {
	dst = appendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}
