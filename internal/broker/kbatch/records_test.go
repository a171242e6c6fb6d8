package kbatch

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testBatch builds a batch of records with the given timestamps (nil keys
// where key is empty), compressed with codec.
func testBatch(t testing.TB, codec int, keys []string, ts []int64) []byte {
	var recs []byte
	for i := range ts {
		r := kmsg.Record{TimestampDelta64: ts[i] - ts[0], OffsetDelta: int32(i), Value: []byte("value"),
			Headers: []kmsg.Header{{Key: "h", Value: []byte{byte(i)}}}}
		if keys[i] != "" {
			r.Key = []byte(keys[i])
		}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	recs = compress(t, codec, recs)
	maxTS := ts[0]
	for _, x := range ts {
		maxTS = max(maxTS, x)
	}
	b := kmsg.RecordBatch{Magic: 2, Attributes: int16(codec), LastOffsetDelta: int32(len(ts) - 1), FirstTimestamp: ts[0],
		MaxTimestamp: maxTS, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(ts)), Records: recs}
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[CRCFrom:], CRC32C))
	return enc
}

func compress(t testing.TB, codec int, in []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case CodecNone:
		return in
	case CodecGzip:
		w := gzip.NewWriter(&buf)
		w.Write(in)
		w.Close()
	case CodecSnappy:
		return snappy.Encode(nil, in)
	case CodecLZ4:
		w := lz4.NewWriter(&buf)
		w.Write(in)
		w.Close()
	case CodecZstd:
		w, _ := zstd.NewWriter(nil)
		return w.EncodeAll(in, nil)
	}
	return buf.Bytes()
}

func TestRecordsEveryCodec(t *testing.T) {
	rd := NewReader(1 << 20)
	ts := []int64{1234, 999999999999, 5000}
	keys := []string{"a", "", "c"}
	for codec := CodecNone; codec <= CodecZstd; codec++ {
		b := testBatch(t, codec, keys, ts)
		if _, _, err := Split(b); err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		var got []int64
		var nulls []bool
		err := rd.Records(b, true, func(r *Record) bool {
			got = append(got, r.Timestamp)
			nulls = append(nulls, r.KeyNull)
			if string(r.Value) != "value" || len(r.Headers) != 1 || r.Headers[0].Value[0] != byte(r.OffsetDelta) {
				t.Fatalf("codec %d record %d: %+v", codec, r.OffsetDelta, r)
			}
			return true
		})
		if err != nil || len(got) != 3 || got[1] != ts[1] || got[2] != ts[2] || nulls[0] || !nulls[1] {
			t.Fatalf("codec %d: %v %v %v", codec, err, got, nulls)
		}
	}
}

func TestXerialSnappy(t *testing.T) {
	raw := []byte("hello hello hello hello")
	framed := append([]byte(nil), xerialMagic...)
	framed = append(framed, 0, 0, 0, 1, 0, 0, 0, 1)
	for _, chunk := range [][]byte{raw[:10], raw[10:]} {
		enc := snappy.Encode(nil, chunk)
		framed = binary.BigEndian.AppendUint32(framed, uint32(len(enc)))
		framed = append(framed, enc...)
	}
	out, err := decodeSnappy(nil, framed, 1<<20)
	if err != nil || string(out) != string(raw) {
		t.Fatalf("%q %v", out, err)
	}
}

// FuzzRecords: arbitrary batch bytes never panic the record reader, and the
// decompression bound holds.
func FuzzRecords(f *testing.F) {
	for codec := CodecNone; codec <= CodecZstd; codec++ {
		f.Add(testBatch(f, codec, []string{"k", ""}, []int64{1, 2}))
	}
	rd := NewReader(1 << 16)
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = rd.Records(b, true, func(r *Record) bool { return true })
		if len(b) >= HeaderSize {
			_, _, _ = Split(b)
		}
	})
}

func TestControlBatch(t *testing.T) {
	for _, commit := range []bool{true, false} {
		b := AppendControlBatch(nil, 42, 3, commit, 0, 1000)
		batches, hdrs, err := Split(b)
		if err != nil || len(batches) != 1 {
			t.Fatalf("split: %v", err)
		}
		h := hdrs[0]
		if h.ProducerID != 42 || h.ProducerEpoch != 3 || h.Attributes&AttrControl == 0 || h.Attributes&AttrTransactional == 0 || h.NumRecords != 1 {
			t.Fatalf("header %+v", h)
		}
		typ, err := ControlType(b)
		if err != nil || (typ == ControlCommit) != commit {
			t.Fatalf("type %d %v", typ, err)
		}
	}
}

func FuzzControlType(f *testing.F) {
	f.Add(AppendControlBatch(nil, 1, 0, true, 0, 0))
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ControlType(b)
	})
}

// TestFilterEveryCodec: filtering keeps the chosen records with their
// offsets, timestamps and values, re-compressed with the batch's codec,
// and a valid batch covering the same offsets.
func TestFilterEveryCodec(t *testing.T) {
	rd := NewReader(1 << 20)
	ts := []int64{1000, 1001, 1002, 1003}
	keys := []string{"a", "b", "a", "c"}
	for codec := CodecNone; codec <= CodecZstd; codec++ {
		b := testBatch(t, codec, keys, ts)
		out, n, err := rd.Filter(b, func(r *Record) bool { return r.OffsetDelta != 0 && r.OffsetDelta != 3 })
		if err != nil || n != 2 {
			t.Fatalf("codec %d: %d kept, %v", codec, n, err)
		}
		if _, hs, err := Split(out); err == nil || hs != nil {
			// Split insists on NumRecords-1 == LastOffsetDelta (what
			// producers send); a compacted batch keeps its last offset.
			t.Fatalf("codec %d: split accepted a compacted batch", codec)
		}
		h := ReadHeader(out)
		if h.Codec() != codec || h.NumRecords != 2 || h.LastOffsetDelta != 3 || h.FirstTimestamp != 1000 ||
			crc32.Checksum(out[CRCFrom:], CRC32C) != h.CRC || int(h.Length) != len(out)-12 {
			t.Fatalf("codec %d: header %+v", codec, h)
		}
		var deltas []int32
		var gotTS []int64
		if err := rd.Records(out, true, func(r *Record) bool {
			deltas = append(deltas, r.OffsetDelta)
			gotTS = append(gotTS, r.Timestamp)
			return true
		}); err != nil || len(deltas) != 2 || deltas[0] != 1 || deltas[1] != 2 || gotTS[0] != 1001 || gotTS[1] != 1002 {
			t.Fatalf("codec %d: %v %v %v", codec, err, deltas, gotTS)
		}
		if same, n, _ := rd.Filter(b, func(*Record) bool { return true }); n != 4 || !bytes.Equal(same, b) {
			t.Fatalf("codec %d: keeping all changed the batch", codec)
		}
		if none, n, _ := rd.Filter(b, func(*Record) bool { return false }); n != 0 || none != nil {
			t.Fatalf("codec %d: keeping none", codec)
		}
	}
}
