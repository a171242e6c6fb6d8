package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

// Requests forwarded by a protocol-only node (Proxy) to the member leading
// a replication group travel as one call each between the nodes: the
// client's request (its API key, version and body, the header's client
// id), who the client is (its address and authenticated principal), and
// the stream it belongs to — the client connection's requests for one
// group, numbered, so the member handles them in the order the client
// sent them, as it would on a connection of its own.

// Forwarded is one client request forwarded to a group's leader.
type Forwarded struct {
	// Stream names the client connection's requests to this member (new
	// for each connection and after any failed call); Seq numbers them
	// from 1.
	Stream, Seq uint64
	// Principal is the client's authenticated principal ("" while it has
	// not authenticated); ClientAddr its host:port.
	Principal  string
	ClientAddr string
	ClientID   string
	Key        int16
	Version    int16
	Body       []byte
}

// ForwardAnswer is a member's answer to a forwarded request.
type ForwardAnswer struct {
	// Body is the response without its header (empty when the request
	// expects none: produce with acks=0).
	Body []byte
	// Close asks the protocol-only node to close the client's connection
	// after the answer (a failed authentication) or instead of one (a
	// request the member refused as malformed: Body empty).
	Close bool
	// Principal is the principal the client authenticated as (set by the
	// answer that completed a SASL exchange).
	Principal string
	// Groups is, for a Metadata answer, the replication group of each
	// partition of every topic it names.
	Groups map[string][]int32
}

const forwardVersion = 1

// errForwardCodec is a malformed forwarded request or answer.
var errForwardCodec = fmt.Errorf("%w: forwarded kafka request", model.ErrCorruptRecord)

// AppendForwarded encodes f.
func AppendForwarded(dst []byte, f Forwarded) []byte {
	dst = append(dst, forwardVersion)
	dst = binary.BigEndian.AppendUint64(dst, f.Stream)
	dst = binary.BigEndian.AppendUint64(dst, f.Seq)
	for _, s := range []string{f.Principal, f.ClientAddr, f.ClientID} {
		dst = appendStr16(dst, s)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(f.Key))
	dst = binary.BigEndian.AppendUint16(dst, uint16(f.Version))
	return append(dst, f.Body...)
}

// DecodeForwarded decodes a forwarded request (its Body aliases b).
func DecodeForwarded(b []byte) (Forwarded, error) {
	var f Forwarded
	if len(b) < 17 || b[0] != forwardVersion {
		return f, errForwardCodec
	}
	f.Stream, f.Seq = binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])
	b = b[17:]
	for _, s := range []*string{&f.Principal, &f.ClientAddr, &f.ClientID} {
		var ok bool
		if *s, b, ok = readStr16(b); !ok {
			return f, errForwardCodec
		}
	}
	if len(b) < 4 {
		return f, errForwardCodec
	}
	f.Key, f.Version = int16(binary.BigEndian.Uint16(b)), int16(binary.BigEndian.Uint16(b[2:]))
	f.Body = b[4:]
	return f, nil
}

// AppendForwardAnswer encodes a.
func AppendForwardAnswer(dst []byte, a ForwardAnswer) []byte {
	flags := byte(0)
	if a.Close {
		flags = 1
	}
	dst = append(dst, forwardVersion, flags)
	dst = appendStr16(dst, a.Principal)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(a.Groups)))
	for topic, groups := range a.Groups {
		dst = appendStr16(dst, topic)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(groups)))
		for _, g := range groups {
			dst = binary.BigEndian.AppendUint32(dst, uint32(g))
		}
	}
	return append(dst, a.Body...)
}

// DecodeForwardAnswer decodes an answer (its Body aliases b).
func DecodeForwardAnswer(b []byte) (ForwardAnswer, error) {
	var a ForwardAnswer
	if len(b) < 2 || b[0] != forwardVersion {
		return a, errForwardCodec
	}
	a.Close = b[1]&1 != 0
	var ok bool
	if a.Principal, b, ok = readStr16(b[2:]); !ok || len(b) < 4 {
		return a, errForwardCodec
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if n > uint32(len(b)) {
		return a, errForwardCodec
	}
	if n > 0 {
		a.Groups = make(map[string][]int32, n)
	}
	for range n {
		var topic string
		if topic, b, ok = readStr16(b); !ok || len(b) < 4 {
			return a, errForwardCodec
		}
		m := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(m)*4 > uint64(len(b)) {
			return a, errForwardCodec
		}
		groups := make([]int32, m)
		for i := range groups {
			groups[i] = int32(binary.BigEndian.Uint32(b[4*i:]))
		}
		a.Groups[topic] = groups
		b = b[4*m:]
	}
	a.Body = b
	return a, nil
}

func appendStr16(dst []byte, s string) []byte {
	if len(s) > 0xFFFF {
		s = s[:0xFFFF]
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func readStr16(b []byte) (string, []byte, bool) {
	if len(b) < 2 {
		return "", nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return "", nil, false
	}
	return string(b[2 : 2+n]), b[2+n:], true
}

// formatPrincipal and parsePrincipal spell a principal as Type:Name.
func formatPrincipal(p security.Principal) string { return p.Type + ":" + p.Name }

func parsePrincipal(s string) (security.Principal, error) {
	t, n, ok := strings.Cut(s, ":")
	if !ok || t == "" || n == "" {
		return security.Principal{}, errors.New("kafka: forwarded principal " + s)
	}
	return security.Principal{Type: t, Name: n}, nil
}
