package kafka

import (
	"encoding/binary"
	"testing"
)

func sampleHeader(flexible bool) []byte {
	b := binary.BigEndian.AppendUint16(nil, 3)
	b = binary.BigEndian.AppendUint16(b, 12)
	b = binary.BigEndian.AppendUint32(b, 77)
	b = binary.BigEndian.AppendUint16(b, 6)
	b = append(b, "client"...)
	if flexible {
		b = append(b, 1, 5, 2, 'h', 'i') // one tag, id 5, two bytes
	}
	return append(b, "body"...)
}

func TestParseRequestHeader(t *testing.T) {
	h, body, err := parseRequestHeader(sampleHeader(true), func(int16, int16) bool { return true })
	if err != nil || h.Key != 3 || h.Version != 12 || h.CorrelationID != 77 || h.ClientID != "client" || string(body) != "body" {
		t.Fatalf("%+v %q %v", h, body, err)
	}
	h, body, err = parseRequestHeader(sampleHeader(false), nil)
	if err != nil || string(body) != "body" {
		t.Fatalf("%+v %q %v", h, body, err)
	}
}

// FuzzParseRequestHeader feeds arbitrary frames to the header parser: it must
// never panic and never return a body longer than its input.
func FuzzParseRequestHeader(f *testing.F) {
	f.Add(sampleHeader(true), true)
	f.Add(sampleHeader(false), false)
	f.Fuzz(func(t *testing.T, b []byte, flex bool) {
		_, body, err := parseRequestHeader(b, func(int16, int16) bool { return flex })
		if err == nil && len(body) > len(b) {
			t.Fatal("body longer than input")
		}
	})
}
