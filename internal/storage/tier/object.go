package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// Sizes of the object format's fixed parts.
const (
	TrailerSize     = 48
	indexHeaderSize = 48
	queueEntrySize  = 48
	recordEntrySize = 8

	// ObjectVersion is the object format version this package writes.
	ObjectVersion = 1

	// MaxSegmentLen is the largest segment an object can hold (the record
	// map's positions are 32 bits).
	MaxSegmentLen = math.MaxUint32
)

var (
	trailerMagic    = [4]byte{'R', 'S', 'T', 'O'}
	trailerEndMagic = [4]byte{'O', 'T', 'S', 'R'}
	castagnoli      = crc32.MakeTable(crc32.Castagnoli)
)

// ErrBadObject marks an object, index or trailer that does not decode or does
// not match what the log committed for it. Such an object is never served.
var ErrBadObject = errors.New("tier: bad object")

// QueueRange is where one queue's records are in an object.
type QueueRange struct {
	Queue        model.QueueID
	Records      uint32
	FirstOffset  model.QueueOffset // base offset of the queue's first record
	EndOffset    model.QueueOffset // one past the last record's last offset
	Start        int64             // object offset of the first record
	Length       int64             // bytes of the queue's records
	MaxTimestamp int64             // largest message timestamp
}

// Trailer is the fixed end of an object.
type Trailer struct {
	Version     uint16
	DataLen     int64
	IndexLen    uint32
	IndexCRC    uint32
	DataCRC     uint32
	SegmentBase model.LogPos
}

// IndexOffset is where the index begins in the object.
func (t Trailer) IndexOffset() int64 { return t.DataLen }

// Size is the object's size.
func (t Trailer) Size() int64 { return t.DataLen + int64(t.IndexLen) + TrailerSize }

// Object is a sealed segment laid out as an object: what to upload and the
// index that describes it. Build makes one from the segment's bytes; its
// Reader streams the object without copying the data.
type Object struct {
	Index   *Index
	Trailer Trailer
	seg     []byte
	runs    []run // data section: segment byte ranges in object order
	index   []byte
	trailer []byte
}

// run is a range of the segment copied as one piece.
type run struct{ from, n uint32 }

// Build lays out the segment data seg (its records, up to the first zero
// length or the end) that begins at log position base. The records are
// checked (header and CRC) as they are planned, so a damaged segment is
// never uploaded. When keep is set, only records of the queues it keeps go
// into the object (the index's first and last log index still span the
// whole segment); a nil keep keeps every record.
func Build(seg []byte, base model.LogPos, keep func(model.QueueID) bool) (*Object, error) {
	if int64(len(seg)) > MaxSegmentLen {
		return nil, fmt.Errorf("%w: segment of %d bytes exceeds %d", ErrBadObject, len(seg), int64(MaxSegmentLen))
	}
	type rec struct {
		queue     model.QueueID
		rel, size uint32
	}
	var recs []rec
	idx := &Index{SegmentBase: base}
	kept := map[model.QueueID]bool{} // keep's answers, asked once per queue
	keeps := func(q model.QueueID) bool {
		k, ok := kept[q]
		if !ok {
			k = keep(q)
			kept[q] = k
		}
		return k
	}
	byQueue := map[model.QueueID]*QueueRange{}
	for off := 0; off+commitlog.HeaderSize <= len(seg); {
		if binary.LittleEndian.Uint32(seg[off:]) == 0 {
			break
		}
		r, err := commitlog.Decode(seg[off:])
		if err != nil {
			return nil, fmt.Errorf("%w: segment %d at %d: %w", ErrBadObject, base, off, err)
		}
		if off == 0 {
			idx.FirstIndex = r.Index
		}
		idx.LastIndex = r.Index
		idx.SegmentLen = int64(off) + int64(r.Length)
		if keep != nil && !keeps(r.Queue) {
			off += int(r.Length)
			continue
		}
		idx.MaxStoreTime = max(idx.MaxStoreTime, r.StoreTime)
		q := byQueue[r.Queue]
		if q == nil {
			q = &QueueRange{Queue: r.Queue, FirstOffset: r.BaseOffset, MaxTimestamp: math.MinInt64}
			byQueue[r.Queue] = q
		}
		q.Records++
		q.Length += int64(r.Length)
		q.EndOffset = max(q.EndOffset, r.BaseOffset+model.QueueOffset(r.Count))
		q.FirstOffset = min(q.FirstOffset, r.BaseOffset)
		q.MaxTimestamp = max(q.MaxTimestamp, r.Timestamp)
		recs = append(recs, rec{queue: r.Queue, rel: uint32(off), size: r.Length})
		off += int(r.Length)
	}
	idx.Queues = make([]QueueRange, 0, len(byQueue))
	for _, q := range byQueue {
		idx.Queues = append(idx.Queues, *q)
	}
	sort.Slice(idx.Queues, func(i, j int) bool { return idx.Queues[i].Queue < idx.Queues[j].Queue })
	next := map[model.QueueID]int64{}
	var start int64
	for i := range idx.Queues {
		idx.Queues[i].Start = start
		next[idx.Queues[i].Queue] = start
		start += idx.Queues[i].Length
	}
	// Each record's place in the object, then the data section as runs of
	// the segment in object order (adjacent records of a queue merged).
	idx.refs = make([]recordRef, len(recs))
	order := make([]int, len(recs))
	for i, r := range recs {
		at := next[r.queue]
		next[r.queue] = at + int64(r.size)
		idx.refs[i] = recordRef{segRel: r.rel, objRel: uint32(at)}
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return idx.refs[order[a]].objRel < idx.refs[order[b]].objRel })
	o := &Object{Index: idx, seg: seg}
	crc := uint32(0)
	for _, i := range order {
		r := recs[i]
		crc = crc32.Update(crc, castagnoli, seg[r.rel:r.rel+r.size])
		if n := len(o.runs); n > 0 && o.runs[n-1].from+o.runs[n-1].n == r.rel {
			o.runs[n-1].n += r.size
			continue
		}
		o.runs = append(o.runs, run{from: r.rel, n: r.size})
	}
	o.index = idx.encode()
	o.Trailer = Trailer{
		Version:     ObjectVersion,
		DataLen:     start,
		IndexLen:    uint32(len(o.index)),
		IndexCRC:    crc32.Checksum(o.index, castagnoli),
		DataCRC:     crc,
		SegmentBase: base,
	}
	o.trailer = o.Trailer.encode()
	return o, nil
}

// Size is the object's size in bytes.
func (o *Object) Size() int64 { return o.Trailer.Size() }

// Reader streams the object: data, index, trailer.
func (o *Object) Reader() io.Reader { return &objectReader{o: o} }

// objectReader walks the runs, then the index and the trailer.
type objectReader struct {
	o    *Object
	run  int   // current run; len(runs) = index, +1 = trailer
	done int64 // bytes of the current piece already read
}

func (r *objectReader) piece() []byte {
	switch n := len(r.o.runs); {
	case r.run < n:
		ru := r.o.runs[r.run]
		return r.o.seg[ru.from : ru.from+ru.n]
	case r.run == n:
		return r.o.index
	case r.run == n+1:
		return r.o.trailer
	}
	return nil
}

func (r *objectReader) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		if r.run > len(r.o.runs)+1 {
			break
		}
		b := r.piece()[r.done:]
		n := copy(p, b)
		total += n
		p = p[n:]
		r.done += int64(n)
		if n == len(b) {
			r.run++
			r.done = 0
		}
	}
	if total == 0 {
		return 0, io.EOF
	}
	return total, nil
}

func (t Trailer) encode() []byte {
	b := make([]byte, TrailerSize)
	copy(b[0:4], trailerMagic[:])
	binary.LittleEndian.PutUint16(b[4:], t.Version)
	binary.LittleEndian.PutUint64(b[8:], uint64(t.DataLen))
	binary.LittleEndian.PutUint32(b[16:], t.IndexLen)
	binary.LittleEndian.PutUint32(b[20:], t.IndexCRC)
	binary.LittleEndian.PutUint32(b[24:], t.DataCRC)
	binary.LittleEndian.PutUint64(b[32:], uint64(t.SegmentBase))
	binary.LittleEndian.PutUint32(b[40:], crc32.Checksum(b[:40], castagnoli))
	copy(b[44:48], trailerEndMagic[:])
	return b
}

// DecodeTrailer decodes an object's last TrailerSize bytes.
func DecodeTrailer(b []byte) (Trailer, error) {
	if len(b) != TrailerSize {
		return Trailer{}, fmt.Errorf("%w: trailer of %d bytes", ErrBadObject, len(b))
	}
	if [4]byte(b[0:4]) != trailerMagic || [4]byte(b[44:48]) != trailerEndMagic {
		return Trailer{}, fmt.Errorf("%w: no trailer magic", ErrBadObject)
	}
	if crc32.Checksum(b[:40], castagnoli) != binary.LittleEndian.Uint32(b[40:]) {
		return Trailer{}, fmt.Errorf("%w: trailer checksum", ErrBadObject)
	}
	t := Trailer{
		Version:     binary.LittleEndian.Uint16(b[4:]),
		DataLen:     int64(binary.LittleEndian.Uint64(b[8:])),
		IndexLen:    binary.LittleEndian.Uint32(b[16:]),
		IndexCRC:    binary.LittleEndian.Uint32(b[20:]),
		DataCRC:     binary.LittleEndian.Uint32(b[24:]),
		SegmentBase: model.LogPos(binary.LittleEndian.Uint64(b[32:])),
	}
	switch {
	case t.Version != ObjectVersion:
		return Trailer{}, fmt.Errorf("%w: object format version %d", ErrBadObject, t.Version)
	case t.DataLen < 0 || t.DataLen > MaxSegmentLen:
		return Trailer{}, fmt.Errorf("%w: data length %d", ErrBadObject, t.DataLen)
	case t.IndexLen < indexHeaderSize:
		return Trailer{}, fmt.Errorf("%w: index length %d", ErrBadObject, t.IndexLen)
	}
	return t, nil
}
