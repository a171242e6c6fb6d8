package commitlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

func sampleRecord() []byte {
	h := Header{Format: model.FormatKafkaBatchV2, Queue: 3, Term: 1, Index: 9, BaseOffset: 100, Count: 2, Timestamp: 1700000000000, StoreTime: 1700000000001, TagHash: 42}
	return AppendRecord(nil, &h, []Key{{Delta: 0, Key: []byte("order-1")}, {Delta: 1, Key: []byte("order-2")}}, []byte("hello world"))
}

func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("ROSETTA_WRITE_SEEDS") == "" {
		t.Skip("set ROSETTA_WRITE_SEEDS=1 to regenerate testdata/fuzz seeds")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	_ = os.MkdirAll(dir, 0o755)
	_ = os.WriteFile(filepath.Join(dir, "record"), []byte("go test fuzz v1\n[]byte("+quoteBytes(sampleRecord())+")\n"), 0o644)
}

func quoteBytes(b []byte) string {
	var sb bytes.Buffer
	sb.WriteByte('"')
	for _, c := range b {
		sb.WriteString("\\x")
		sb.WriteByte("0123456789abcdef"[c>>4])
		sb.WriteByte("0123456789abcdef"[c&15])
	}
	sb.WriteByte('"')
	return sb.String()
}

// FuzzDecode checks that Decode never panics, never reads past its input, and
// that a record it accepts re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(sampleRecord())
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if int(r.Length) > len(b) {
			t.Fatalf("length %d beyond input %d", r.Length, len(b))
		}
		var keys []Key
		if err := r.EachKey(func(k Key) { keys = append(keys, Key{Delta: k.Delta, Key: append([]byte(nil), k.Key...)}) }); err != nil {
			t.Fatal(err)
		}
		h := r.Header
		again := AppendRecord(nil, &h, keys, r.Payload)
		if !bytes.Equal(again, b[:r.Length]) {
			t.Fatalf("re-encoding differs")
		}
		r2, err := Decode(again)
		if err != nil || r2.Header != r.Header {
			t.Fatalf("second decode: %v", err)
		}
	})
}
