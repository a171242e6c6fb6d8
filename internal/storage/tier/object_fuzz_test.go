package tier

import (
	"io"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// FuzzDecodeObject feeds arbitrary bytes to the decoders a cold read runs
// on an object fetched from the bucket: they must refuse or describe only
// places inside the object.
func FuzzDecodeObject(f *testing.F) {
	for seed := range uint64(3) {
		seg, _, _ := testSegment(f, 20, 3, seed)
		o, err := Build(seg, model.LogPos(seed<<20), nil)
		if err != nil {
			f.Fatal(err)
		}
		obj, _ := io.ReadAll(o.Reader())
		f.Add(obj, uint32(100))
	}
	f.Fuzz(func(t *testing.T, obj []byte, probe uint32) {
		if len(obj) < TrailerSize {
			return
		}
		tr, err := DecodeTrailer(obj[len(obj)-TrailerSize:])
		if err != nil || tr.Size() != int64(len(obj)) {
			return
		}
		x, err := DecodeIndex(obj[tr.IndexOffset():tr.IndexOffset()+int64(tr.IndexLen)], tr)
		if err != nil {
			return
		}
		for _, pos := range []model.LogPos{x.SegmentBase, x.SegmentBase + model.LogPos(probe), x.SegmentEnd() - 1} {
			at, end, ok := x.Locate(pos)
			if ok && (at < 0 || end > tr.DataLen || at >= end) {
				t.Fatalf("Locate(%d) = %d..%d outside data of %d", pos, at, end, tr.DataLen)
			}
		}
		for _, q := range x.Queues {
			if _, ok := x.Queue(q.Queue); !ok {
				t.Fatalf("queue %d listed but not found", q.Queue)
			}
		}
	})
}

// FuzzBuild lays out arbitrary segment bytes: a segment that does not decode
// is refused, never half uploaded.
func FuzzBuild(f *testing.F) {
	seg, _, _ := testSegment(f, 10, 2, 9)
	f.Add(seg)
	f.Fuzz(func(t *testing.T, seg []byte) {
		o, err := Build(seg, 0, nil)
		if err != nil {
			return
		}
		obj, _ := io.ReadAll(o.Reader())
		if int64(len(obj)) != o.Size() {
			t.Fatalf("object of %d bytes, size says %d", len(obj), o.Size())
		}
		if _, err := DecodeIndex(obj[o.Trailer.IndexOffset():o.Trailer.IndexOffset()+int64(o.Trailer.IndexLen)], o.Trailer); err != nil {
			t.Fatalf("built an object whose index does not decode: %v", err)
		}
	})
}
