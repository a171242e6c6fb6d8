package broker

import (
	"bytes"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// Records sent for a moved queue come out as they went in.
func TestRecordsCodec(t *testing.T) {
	in := []*storage.Record{
		{Format: model.FormatMessage, Queue: 7, Count: 1, Timestamp: 11, TagHash: 99, Payload: []byte("one"),
			Keys: []commitlog.Key{{Key: []byte("k1")}, {Delta: 0, Key: []byte("uniq")}}},
		{Format: model.FormatKafkaBatchV2, Queue: 7, Count: 3, Timestamp: 12, StoreTime: 13, Payload: bytes.Repeat([]byte("x"), 300)},
	}
	out, err := DecodeRecords(EncodeRecords(nil, in))
	if err != nil || len(out) != len(in) {
		t.Fatalf("decoded %d records (%v)", len(out), err)
	}
	for i := range in {
		a, b := in[i], out[i]
		if a.Format != b.Format || a.Queue != b.Queue || a.Count != b.Count || a.Timestamp != b.Timestamp || a.StoreTime != b.StoreTime ||
			a.TagHash != b.TagHash || !bytes.Equal(a.Payload, b.Payload) || len(a.Keys) != len(b.Keys) {
			t.Fatalf("record %d: %+v came back as %+v", i, a, b)
		}
	}
	if _, err := DecodeRecords([]byte{1, 2, 3}); err == nil {
		t.Fatal("garbage decoded")
	}
}

// FuzzDecodeRecords: no input crashes the decoders of records a moved
// queue's calls carry, and what decodes encodes back to the same records.
func FuzzDecodeRecords(f *testing.F) {
	f.Add(EncodeRecords(nil, []*storage.Record{{Format: model.FormatMessage, Queue: 1, Count: 1, Payload: []byte("p"),
		Keys: []commitlog.Key{{Key: []byte("k")}}}}))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := DecodeRecords(b)
		if err == nil {
			again, err := DecodeRecords(EncodeRecords(nil, recs))
			if err != nil || len(again) != len(recs) {
				t.Fatalf("re-encoded records do not decode: %v", err)
			}
		}
		stored, err := DecodeStored(b)
		if err == nil {
			if _, err := EncodeStored(nil, stored); err != nil {
				t.Fatalf("decoded stored records do not encode: %v", err)
			}
		}
	})
}
