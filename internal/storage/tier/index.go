package tier

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"

	"github.com/rosettamq/rosetta/internal/model"
)

// Index describes an object: the segment it holds, where each queue's
// records are, and where each record of the segment went.
type Index struct {
	SegmentBase  model.LogPos
	SegmentLen   int64 // bytes of records in the segment
	FirstIndex   model.Index
	LastIndex    model.Index
	MaxStoreTime int64 // newest append time of a record (ms)
	Queues       []QueueRange
	refs         []recordRef // in log order
}

// recordRef places one record: its offset in the segment and in the object.
type recordRef struct{ segRel, objRel uint32 }

// Records is the number of records the object holds.
func (x *Index) Records() int { return len(x.refs) }

// SegmentEnd is the log position after the segment's last record.
func (x *Index) SegmentEnd() model.LogPos { return x.SegmentBase + model.LogPos(x.SegmentLen) }

// Queue returns the range of queue id, if the object holds any of its
// records.
func (x *Index) Queue(id model.QueueID) (QueueRange, bool) {
	i := sort.Search(len(x.Queues), func(i int) bool { return x.Queues[i].Queue >= id })
	if i < len(x.Queues) && x.Queues[i].Queue == id {
		return x.Queues[i], true
	}
	return QueueRange{}, false
}

// Locate finds the record that begins at log position pos: its offset in the
// object and the end of its queue's data there (how far a read of that queue
// may run on). ok is false when no record of the object begins at pos.
func (x *Index) Locate(pos model.LogPos) (at, queueEnd int64, ok bool) {
	if pos < x.SegmentBase || pos >= x.SegmentEnd() {
		return 0, 0, false
	}
	rel := uint32(pos - x.SegmentBase)
	i := sort.Search(len(x.refs), func(i int) bool { return x.refs[i].segRel >= rel })
	if i == len(x.refs) || x.refs[i].segRel != rel {
		return 0, 0, false
	}
	at = int64(x.refs[i].objRel)
	q := sort.Search(len(x.Queues), func(q int) bool { return x.Queues[q].Start > at }) - 1
	return at, x.Queues[q].Start + x.Queues[q].Length, true
}

func (x *Index) encode() []byte {
	b := make([]byte, indexHeaderSize+queueEntrySize*len(x.Queues)+recordEntrySize*len(x.refs))
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(x.SegmentBase))
	le.PutUint64(b[8:], uint64(x.SegmentLen))
	le.PutUint64(b[16:], uint64(x.FirstIndex))
	le.PutUint64(b[24:], uint64(x.LastIndex))
	le.PutUint32(b[32:], uint32(len(x.Queues)))
	le.PutUint32(b[36:], uint32(len(x.refs)))
	le.PutUint64(b[40:], uint64(x.MaxStoreTime))
	p := b[indexHeaderSize:]
	for _, q := range x.Queues {
		le.PutUint32(p[0:], uint32(q.Queue))
		le.PutUint32(p[4:], q.Records)
		le.PutUint64(p[8:], uint64(q.FirstOffset))
		le.PutUint64(p[16:], uint64(q.EndOffset))
		le.PutUint64(p[24:], uint64(q.Start))
		le.PutUint64(p[32:], uint64(q.Length))
		le.PutUint64(p[40:], uint64(q.MaxTimestamp))
		p = p[queueEntrySize:]
	}
	for _, r := range x.refs {
		le.PutUint32(p[0:], r.segRel)
		le.PutUint32(p[4:], r.objRel)
		p = p[recordEntrySize:]
	}
	return b
}

// DecodeIndex decodes an object's index and checks it against the object's
// trailer: its checksum, and that its queues tile the data and its records
// lie inside them. A reader trusts nothing else about an object.
func DecodeIndex(b []byte, t Trailer) (*Index, error) {
	if len(b) != int(t.IndexLen) || len(b) < indexHeaderSize {
		return nil, fmt.Errorf("%w: index of %d bytes, trailer says %d", ErrBadObject, len(b), t.IndexLen)
	}
	if crc32.Checksum(b, castagnoli) != t.IndexCRC {
		return nil, fmt.Errorf("%w: index checksum", ErrBadObject)
	}
	le := binary.LittleEndian
	x := &Index{
		SegmentBase:  model.LogPos(le.Uint64(b[0:])),
		SegmentLen:   int64(le.Uint64(b[8:])),
		FirstIndex:   model.Index(le.Uint64(b[16:])),
		LastIndex:    model.Index(le.Uint64(b[24:])),
		MaxStoreTime: int64(le.Uint64(b[40:])),
	}
	nq, nr := int64(le.Uint32(b[32:])), int64(le.Uint32(b[36:]))
	if int64(len(b)) != indexHeaderSize+queueEntrySize*nq+recordEntrySize*nr {
		return nil, fmt.Errorf("%w: index of %d bytes for %d queues and %d records", ErrBadObject, len(b), nq, nr)
	}
	if x.SegmentBase != t.SegmentBase || x.SegmentBase < 0 || x.SegmentLen < 0 || x.SegmentLen > MaxSegmentLen ||
		x.SegmentLen < t.DataLen || x.LastIndex < x.FirstIndex {
		return nil, fmt.Errorf("%w: index header disagrees with trailer", ErrBadObject)
	}
	p := b[indexHeaderSize:]
	x.Queues = make([]QueueRange, nq)
	var start, records int64
	for i := range x.Queues {
		q := QueueRange{
			Queue:        model.QueueID(le.Uint32(p[0:])),
			Records:      le.Uint32(p[4:]),
			FirstOffset:  model.QueueOffset(le.Uint64(p[8:])),
			EndOffset:    model.QueueOffset(le.Uint64(p[16:])),
			Start:        int64(le.Uint64(p[24:])),
			Length:       int64(le.Uint64(p[32:])),
			MaxTimestamp: int64(le.Uint64(p[40:])),
		}
		if (i > 0 && q.Queue <= x.Queues[i-1].Queue) || q.Start != start || q.Length <= 0 || q.Length > t.DataLen-start ||
			q.Records == 0 || q.FirstOffset < 0 || q.EndOffset < q.FirstOffset {
			return nil, fmt.Errorf("%w: queue entry %d", ErrBadObject, i)
		}
		start += q.Length
		records += int64(q.Records)
		x.Queues[i] = q
		p = p[queueEntrySize:]
	}
	if start != t.DataLen || records != nr {
		return nil, fmt.Errorf("%w: queues cover %d bytes and %d records of %d and %d", ErrBadObject, start, records, t.DataLen, nr)
	}
	x.refs = make([]recordRef, nr)
	for i := range x.refs {
		r := recordRef{segRel: le.Uint32(p[0:]), objRel: le.Uint32(p[4:])}
		if (i > 0 && r.segRel <= x.refs[i-1].segRel) || int64(r.segRel) >= x.SegmentLen || int64(r.objRel) >= t.DataLen {
			return nil, fmt.Errorf("%w: record entry %d", ErrBadObject, i)
		}
		x.refs[i] = r
		p = p[recordEntrySize:]
	}
	return x, nil
}
