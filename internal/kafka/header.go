package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// requestHeader is the Kafka request header (v1, or v2 with tagged fields).
type requestHeader struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      string
}

var errShortHeader = errors.New("kafka: truncated request header")

// parseRequestHeader decodes the header at the start of a request frame and
// returns the body. flexible says whether the request version uses header v2
// (a tagged-field section follows the client id).
func parseRequestHeader(b []byte, flexible func(key, version int16) bool) (requestHeader, []byte, error) {
	var h requestHeader
	if len(b) < 10 {
		return h, nil, errShortHeader
	}
	h.Key = int16(binary.BigEndian.Uint16(b))
	h.Version = int16(binary.BigEndian.Uint16(b[2:]))
	h.CorrelationID = int32(binary.BigEndian.Uint32(b[4:]))
	n := int(int16(binary.BigEndian.Uint16(b[8:])))
	b = b[10:]
	if n > 0 {
		if n > len(b) {
			return h, nil, errShortHeader
		}
		h.ClientID = string(b[:n])
		b = b[n:]
	}
	if flexible != nil && flexible(h.Key, h.Version) {
		rest, err := skipTags(b)
		if err != nil {
			if h.Key == apiVersionsKey {
				// A version newer than we know: its header layout is a
				// guess, and the answer is the v0 downgrade anyway.
				return h, nil, nil
			}
			return h, nil, err
		}
		b = rest
	}
	return h, b, nil
}

// skipTags skips a tagged-field section.
func skipTags(b []byte) ([]byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(b)) {
		return nil, fmt.Errorf("kafka: %d tagged fields in %d bytes", n, len(b))
	}
	for i := uint64(0); i < n; i++ {
		if _, b, err = uvarint(b); err != nil { // tag
			return nil, err
		}
		var size uint64
		if size, b, err = uvarint(b); err != nil {
			return nil, err
		}
		if size > uint64(len(b)) {
			return nil, errShortHeader
		}
		b = b[size:]
	}
	return b, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errShortHeader
	}
	return v, b[n:], nil
}

// appendResponseHeader appends the response header: the correlation id, and
// an empty tagged-field section for flexible responses (header v1).
func appendResponseHeader(dst []byte, corr int32, flexible bool) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if flexible {
		dst = append(dst, 0)
	}
	return dst
}
