package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func jsonFrame(hdr string) []byte {
	frame := make([]byte, 4+len(hdr))
	binary.BigEndian.PutUint32(frame, uint32(len(hdr)))
	copy(frame[4:], hdr)
	return frame
}

// TestDecodeBoundsHeaders: headers over MaxHeaderBytes, and headers with
// more than MaxExtFields fields in either serialization (and through the
// general JSON decoder), are malformed; refusing a header of many fields
// costs a small multiple of its size.
func TestDecodeBoundsHeaders(t *testing.T) {
	fields := func(n int, escape bool) string {
		var sb strings.Builder
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `"k%d":"v"`, i)
		}
		if escape {
			sb.WriteString(`,"e":"\u0041"`)
		}
		return `{"code":10,"extFields":{` + sb.String() + `},"flag":0,"language":"GO","opaque":1,"version":317}`
	}
	if _, err := Decode(jsonFrame(fields(MaxExtFields-1, false))); err != nil {
		t.Fatalf("%d fields: %v", MaxExtFields-1, err)
	}
	for name, frame := range map[string][]byte{
		"too many fields":                jsonFrame(fields(MaxExtFields+1, false)),
		"too many fields, general path":  jsonFrame(fields(MaxExtFields+1, true)),
		"oversize header":                jsonFrame(`{"code":10,"remark":"` + strings.Repeat("r", MaxHeaderBytes) + `"}`),
		"too many fields, binary header": binaryFrame(MaxExtFields + 1),
	} {
		if _, err := Decode(frame); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	frame := jsonFrame(fields(40_000, false)[:MaxHeaderBytes-10] + `"}}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Decode(frame)
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; err == nil || n > 4*uint64(len(frame)) {
		t.Fatalf("a header of many fields: %v, %d bytes allocated for a frame of %d", err, n, len(frame))
	}
}

func binaryFrame(nfields int) []byte {
	var ext []byte
	for i := range nfields {
		k, v := fmt.Sprint("k", i), "v"
		ext = binary.BigEndian.AppendUint16(ext, uint16(len(k)))
		ext = append(ext, k...)
		ext = binary.BigEndian.AppendUint32(ext, uint32(len(v)))
		ext = append(ext, v...)
	}
	var hdr []byte
	hdr = binary.BigEndian.AppendUint16(hdr, 10) // code
	hdr = append(hdr, 0)                         // language
	hdr = binary.BigEndian.AppendUint16(hdr, 317)
	hdr = binary.BigEndian.AppendUint32(hdr, 1) // opaque
	hdr = binary.BigEndian.AppendUint32(hdr, 0) // flag
	hdr = binary.BigEndian.AppendUint32(hdr, 0) // remark
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(ext)))
	hdr = append(hdr, ext...)
	frame := binary.BigEndian.AppendUint32(nil, uint32(SerializeRocketMQ)<<24|uint32(len(hdr)))
	return append(frame, hdr...)
}
