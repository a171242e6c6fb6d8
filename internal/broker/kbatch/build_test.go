package kbatch

import (
	"bytes"
	"testing"
)

// TestBuildReadsBack: a built batch, with each codec, decodes to the same
// records, checksummed and sized as Split expects.
func TestBuildReadsBack(t *testing.T) {
	rd := NewReader(1 << 20)
	in := []NewRecord{
		{Timestamp: 1000, Key: []byte("k"), Value: []byte("v1"), Headers: []RecordHeader{{Key: "h", Value: []byte("x")}}},
		{Timestamp: 1005, Value: []byte("v2"), Headers: []RecordHeader{{Key: "null"}, {Key: "", Value: []byte{}}}},
		{Timestamp: 999, Key: []byte("gone"), ValueNull: true},
	}
	for _, codec := range []int{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		b, err := rd.Build(codec, in)
		if err != nil {
			t.Fatal(err)
		}
		batches, hdrs, err := Split(b)
		if err != nil || len(batches) != 1 {
			t.Fatalf("codec %d: split: %v", codec, err)
		}
		if h := hdrs[0]; h.NumRecords != 3 || h.ProducerID != -1 || h.Codec() != codec || h.MaxTimestamp != 1005 || h.FirstTimestamp != 1000 {
			t.Fatalf("codec %d: header %+v", codec, h)
		}
		i := 0
		err = rd.Records(b, true, func(r *Record) bool {
			w := in[i]
			if r.Timestamp != w.Timestamp || !bytes.Equal(r.Key, w.Key) || r.KeyNull != (w.Key == nil) ||
				!bytes.Equal(r.Value, w.Value) || r.ValueNull != w.ValueNull || len(r.Headers) != len(w.Headers) || r.OffsetDelta != int32(i) {
				t.Fatalf("codec %d: record %d: %+v", codec, i, r)
			}
			i++
			return true
		})
		if err != nil || i != 3 {
			t.Fatalf("codec %d: %d records, %v", codec, i, err)
		}
	}
}
