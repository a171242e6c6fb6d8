package tier

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// testSegment encodes n records spread over queues in log order, the way a
// group's commit log interleaves them, and returns the segment bytes with
// each record's position relative to the segment and its header.
func testSegment(t testing.TB, n, queues int, seed uint64) ([]byte, []int, []commitlog.Header) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	next := map[model.QueueID]model.QueueOffset{}
	var seg []byte
	var rels []int
	var hs []commitlog.Header
	for i := range n {
		q := model.QueueID(rng.IntN(queues) * 7)
		count := uint32(1 + rng.IntN(5))
		h := commitlog.Header{
			Version: 1, Format: model.PayloadFormat(1), Queue: q, Term: 3, Index: model.Index(100 + i),
			BaseOffset: next[q], Count: count, Timestamp: int64(1000 + i), StoreTime: int64(2000 + i),
		}
		next[q] += model.QueueOffset(count)
		payload := bytes.Repeat([]byte{byte(i)}, 1+rng.IntN(300))
		rels = append(rels, len(seg))
		seg = commitlog.AppendRecord(seg, &h, []commitlog.Key{{Delta: 0, Key: fmt.Appendf(nil, "k%d", i)}}, payload)
		got, err := commitlog.DecodeHeader(seg[rels[i]:])
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, got)
	}
	return seg, rels, hs
}

// open decodes an object the way a reader does: trailer, then index.
func open(t testing.TB, obj []byte) (Trailer, *Index) {
	t.Helper()
	tr, err := DecodeTrailer(obj[len(obj)-TrailerSize:])
	if err != nil {
		t.Fatal(err)
	}
	if tr.Size() != int64(len(obj)) {
		t.Fatalf("trailer says %d bytes, object has %d", tr.Size(), len(obj))
	}
	x, err := DecodeIndex(obj[tr.IndexOffset():tr.IndexOffset()+int64(tr.IndexLen)], tr)
	if err != nil {
		t.Fatal(err)
	}
	return tr, x
}

// TestObjectLeavesOutQueues builds an object without one queue's records
// (a topic that opted out of tiering): they are not in it, every other
// record is, and the index still spans the whole segment.
func TestObjectLeavesOutQueues(t *testing.T) {
	const base = model.LogPos(1 << 30)
	const left = model.QueueID(14)
	seg, rels, hs := testSegment(t, 300, 5, 2)
	o, err := Build(seg, base, func(q model.QueueID) bool { return q != left })
	if err != nil {
		t.Fatal(err)
	}
	obj, err := io.ReadAll(o.Reader())
	if err != nil {
		t.Fatal(err)
	}
	_, x := open(t, obj)
	if x.FirstIndex != 100 || x.LastIndex != 399 || x.SegmentEnd() != base+model.LogPos(len(seg)) {
		t.Fatalf("index header %+v", x)
	}
	if _, ok := x.Queue(left); ok {
		t.Fatalf("queue %d is in the object", left)
	}
	var leftBytes, kept int
	for i, rel := range rels {
		at, _, ok := x.Locate(base + model.LogPos(rel))
		if hs[i].Queue == left {
			if ok {
				t.Fatalf("record %d of the left-out queue found", i)
			}
			leftBytes += int(hs[i].Length)
			continue
		}
		kept++
		want := seg[rel : rel+int(hs[i].Length)]
		if !ok || !bytes.Equal(obj[at:at+int64(len(want))], want) {
			t.Fatalf("record %d missing or different", i)
		}
	}
	if leftBytes == 0 || x.Records() != kept || o.Trailer.DataLen != int64(len(seg)-leftBytes) {
		t.Fatalf("left out %d bytes, %d of %d records in the object, data %d bytes", leftBytes, x.Records(), kept, o.Trailer.DataLen)
	}
}

func TestObjectRoundTrip(t *testing.T) {
	const base = model.LogPos(5 << 30)
	seg, rels, hs := testSegment(t, 500, 9, 1)
	// Trailing zeros stand for a segment's unused space.
	o, err := Build(append(seg, make([]byte, 100)...), base, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := io.ReadAll(o.Reader())
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(obj)) != o.Size() {
		t.Fatalf("read %d bytes of a %d-byte object", len(obj), o.Size())
	}
	tr, x := open(t, obj)
	if tr != o.Trailer || tr.DataLen != int64(len(seg)) {
		t.Fatalf("trailer %+v, built %+v, segment %d bytes", tr, o.Trailer, len(seg))
	}
	if x.FirstIndex != 100 || x.LastIndex != 599 || x.Records() != 500 || x.SegmentEnd() != base+model.LogPos(len(seg)) || x.MaxStoreTime != 2499 {
		t.Fatalf("index header %+v", x)
	}
	// Every record is found by its position, byte for byte, inside its
	// queue's range; a queue's records follow one another in offset order.
	for i, rel := range rels {
		at, end, ok := x.Locate(base + model.LogPos(rel))
		if !ok {
			t.Fatalf("record %d at %d not found", i, rel)
		}
		want := seg[rel : rel+int(hs[i].Length)]
		if !bytes.Equal(obj[at:at+int64(len(want))], want) {
			t.Fatalf("record %d differs in the object", i)
		}
		q, _ := x.Queue(hs[i].Queue)
		if at < q.Start || end != q.Start+q.Length {
			t.Fatalf("record %d at %d outside its queue's range %+v", i, at, q)
		}
	}
	if _, _, ok := x.Locate(base + 1); ok {
		t.Fatal("found a record inside another")
	}
	if _, _, ok := x.Locate(base - 1); ok {
		t.Fatal("found a record before the segment")
	}
	for _, q := range x.Queues {
		next := q.FirstOffset
		for at := q.Start; at < q.Start+q.Length; {
			h, err := commitlog.DecodeHeader(obj[at:])
			if err != nil || h.Queue != q.Queue || h.BaseOffset != next {
				t.Fatalf("queue %d at %d: %+v %v, want offset %d", q.Queue, at, h, err, next)
			}
			next += model.QueueOffset(h.Count)
			at += int64(h.Length)
		}
		if next != q.EndOffset {
			t.Fatalf("queue %d ends at %d, index says %d", q.Queue, next, q.EndOffset)
		}
	}
}

func TestObjectRefusesDamage(t *testing.T) {
	seg, rels, _ := testSegment(t, 50, 3, 2)
	bad := bytes.Clone(seg)
	bad[rels[10]+40] ^= 1
	if _, err := Build(bad, 0, nil); !errors.Is(err, ErrBadObject) {
		t.Fatalf("built an object of a damaged segment: %v", err)
	}
	o, err := Build(seg, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := io.ReadAll(o.Reader())
	tr := o.Trailer
	for _, flip := range []int64{tr.IndexOffset(), tr.IndexOffset() + 50, tr.Size() - 10, tr.Size() - 1} {
		b := bytes.Clone(obj)
		b[flip] ^= 0x10
		t2, err := DecodeTrailer(b[len(b)-TrailerSize:])
		if err == nil {
			_, err = DecodeIndex(b[t2.IndexOffset():t2.IndexOffset()+int64(t2.IndexLen)], t2)
		}
		if !errors.Is(err, ErrBadObject) {
			t.Fatalf("flip at %d accepted: %v", flip, err)
		}
	}
}

func TestObjectEmptySegment(t *testing.T) {
	o, err := Build(make([]byte, 4096), 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := io.ReadAll(o.Reader())
	_, x := open(t, obj)
	if x.Records() != 0 || len(x.Queues) != 0 || x.SegmentLen != 0 {
		t.Fatalf("empty segment gave %+v", x)
	}
}

// TestObjectReaderSmallReads streams the object through one-byte reads.
func TestObjectReaderSmallReads(t *testing.T) {
	seg, _, _ := testSegment(t, 40, 4, 3)
	o, err := Build(seg, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := io.ReadAll(o.Reader())
	var got []byte
	r := o.Reader()
	p := make([]byte, 1)
	for {
		n, err := r.Read(p)
		got = append(got, p[:n]...)
		if err == io.EOF {
			break
		}
	}
	if !bytes.Equal(got, whole) {
		t.Fatal("small reads differ from one read")
	}
}
