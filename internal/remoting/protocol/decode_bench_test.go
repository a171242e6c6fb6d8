package protocol

import "testing"

// BenchmarkDecodeSendHeader decodes the frame of a Go client's
// SEND_MESSAGE_V2 (short header names, properties with a unique key).
func BenchmarkDecodeSendHeader(b *testing.B) {
	frame := AppendFrame(nil, &Command{Code: SendMessageV2, Language: "GO", Version: 317, Opaque: 42,
		ExtFields: Pairs("a", "bench-producer", "b", "bench", "c", "TBW102", "d", "4", "e", "1", "f", "0",
			"g", "1700000000000", "h", "0", "i", "UNIQ_KEY\x017F0000010000000000000000000042\x02WAIT\x01true\x02TAGS\x01tag-a\x02",
			"j", "0", "k", "false", "l", "0", "m", "false"),
		Body: make([]byte, 128)})[4:]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}
