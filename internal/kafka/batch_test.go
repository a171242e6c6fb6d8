package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
)

func TestMessageBatchRoundTrip(t *testing.T) {
	b := appendMessageBatch(nil, 42, 1000, &model.Message{Key: []byte("k"), Body: []byte("v"), Tags: "T",
		Headers: []model.Header{{Key: "h", Value: []byte("1")}}})
	bs, hs, err := kbatch.Split(b)
	if err != nil || len(bs) != 1 || hs[0].FirstOffset != 42 || hs[0].NumRecords != 1 {
		t.Fatalf("%v %+v", err, hs)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	var r kmsg.Record
	if err := r.ReadFrom(rb.Records); err != nil || string(r.Value) != "v" || len(r.Headers) != 2 {
		t.Fatalf("%v %+v", err, r)
	}
	// The record's length prefix must be right: clients check it.
	n := 0
	err = kbatch.NewReader(1<<20).Records(b, true, func(rec *kbatch.Record) bool {
		n++
		return string(rec.Value) == "v" && string(rec.Key) == "k"
	})
	if err != nil || n != 1 {
		t.Fatalf("records: %d %v", n, err)
	}
}

// FuzzSplitBatches (kbatch.Split): arbitrary produce payloads never panic the validator and
// accepted batches always lie within the input.
func FuzzSplitBatches(f *testing.F) {
	f.Add(appendMessageBatch(nil, 0, 1, &model.Message{Body: []byte("x")}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		bs, hs, err := kbatch.Split(b)
		if err != nil {
			return
		}
		n := 0
		for i, x := range bs {
			n += len(x)
			if hs[i].NumRecords <= 0 {
				t.Fatal("accepted empty batch")
			}
		}
		if n != len(b) {
			t.Fatalf("batches cover %d of %d bytes", n, len(b))
		}
	})
}
