package storage

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// The tier manifest: which commit-log segments are in the bucket. A segment
// counts as tiered once a tier commit record naming its object is in the
// log (control op opTierCommit of queue 0) — replicated with the group's
// other records, replayed at restart, the same on every replica. The
// manifest is a state keeper of the engine's own, so checkpoints and
// keeper snapshots carry it past the deletion of the segments that held
// its records.
//
// Record payload: op | version 1 | a tiered segment (encodeTieredSegment).

// opTierCommit is the control op that commits a segment's object.
const opTierCommit = 7

// tierOp says whether a control payload changes the manifest (applied
// once durable, or committed in a group).
func tierOp(payload []byte) bool {
	return len(payload) > 0 && (payload[0] == opTierCommit || payload[0] == opTierDrop)
}

// tierManifestName is the manifest's checkpoint section.
const tierManifestName = "tier-manifest"

// TieredSegment is one commit-log segment committed to the bucket.
type TieredSegment struct {
	Key          string     // object key, relative to the bucket's prefix
	Term         model.Term // term of the leader that uploaded it (in the key too)
	Base, End    model.LogPos
	FirstIndex   model.Index
	LastIndex    model.Index
	Size         int64 // object size
	IndexLen     uint32
	IndexCRC     uint32
	DataCRC      uint32
	MaxStoreTime int64 // newest append time of its records (ms)
	Queues       []TieredQueue
}

// TieredQueue is the offset range of one queue in a tiered segment.
type TieredQueue struct {
	Queue        model.QueueID
	First, End   model.QueueOffset
	MaxTimestamp int64
}

// holds reports whether the segment's object carries queue q's records.
func (s *TieredSegment) holds(q model.QueueID) bool {
	i := sort.Search(len(s.Queues), func(i int) bool { return s.Queues[i].Queue >= q })
	return i < len(s.Queues) && s.Queues[i].Queue == q
}

const tieredSegmentFixed = 2 + 8*6 + 8 + 4*3 + 8 + 4

func encodeTieredSegment(dst []byte, s *TieredSegment) []byte {
	le := binary.LittleEndian
	dst = le.AppendUint16(dst, uint16(len(s.Key)))
	dst = append(dst, s.Key...)
	dst = le.AppendUint64(dst, uint64(s.Term))
	dst = le.AppendUint64(dst, uint64(s.Base))
	dst = le.AppendUint64(dst, uint64(s.End))
	dst = le.AppendUint64(dst, uint64(s.FirstIndex))
	dst = le.AppendUint64(dst, uint64(s.LastIndex))
	dst = le.AppendUint64(dst, uint64(s.Size))
	dst = le.AppendUint64(dst, uint64(s.MaxStoreTime))
	dst = le.AppendUint32(dst, s.IndexLen)
	dst = le.AppendUint32(dst, s.IndexCRC)
	dst = le.AppendUint32(dst, s.DataCRC)
	dst = le.AppendUint32(dst, uint32(len(s.Queues)))
	for _, q := range s.Queues {
		dst = le.AppendUint32(dst, uint32(q.Queue))
		dst = le.AppendUint64(dst, uint64(q.First))
		dst = le.AppendUint64(dst, uint64(q.End))
		dst = le.AppendUint64(dst, uint64(q.MaxTimestamp))
	}
	return dst
}

// decodeTieredSegment decodes one tiered segment from the front of b and
// returns the rest.
func decodeTieredSegment(b []byte) (*TieredSegment, []byte, error) {
	le := binary.LittleEndian
	bad := func(what string) (*TieredSegment, []byte, error) {
		return nil, nil, fmt.Errorf("%w: tiered segment: %s", model.ErrCorruptRecord, what)
	}
	if len(b) < 2 {
		return bad("short")
	}
	n := int(le.Uint16(b))
	if len(b) < tieredSegmentFixed+n {
		return bad("short")
	}
	s := &TieredSegment{Key: string(b[2 : 2+n])}
	p := b[2+n:]
	s.Term = model.Term(le.Uint64(p[0:]))
	s.Base = model.LogPos(le.Uint64(p[8:]))
	s.End = model.LogPos(le.Uint64(p[16:]))
	s.FirstIndex = model.Index(le.Uint64(p[24:]))
	s.LastIndex = model.Index(le.Uint64(p[32:]))
	s.Size = int64(le.Uint64(p[40:]))
	s.MaxStoreTime = int64(le.Uint64(p[48:]))
	s.IndexLen = le.Uint32(p[56:])
	s.IndexCRC = le.Uint32(p[60:])
	s.DataCRC = le.Uint32(p[64:])
	nq := int64(le.Uint32(p[68:]))
	p = p[72:]
	if int64(len(p)) < nq*28 {
		return bad("queues cut short")
	}
	if s.Key == "" || s.Base < 0 || s.End < s.Base || s.Base.IsLocal() || s.LastIndex < s.FirstIndex || s.Size < int64(s.IndexLen)+tier.TrailerSize {
		return bad("inconsistent fields")
	}
	s.Queues = make([]TieredQueue, nq)
	for i := range s.Queues {
		s.Queues[i] = TieredQueue{
			Queue:        model.QueueID(le.Uint32(p[0:])),
			First:        model.QueueOffset(le.Uint64(p[4:])),
			End:          model.QueueOffset(le.Uint64(p[12:])),
			MaxTimestamp: int64(le.Uint64(p[20:])),
		}
		p = p[28:]
	}
	return s, p, nil
}

// tierCommitPayload is the control payload committing s.
func tierCommitPayload(s *TieredSegment) []byte {
	return encodeTieredSegment([]byte{opTierCommit, 1}, s)
}

// tierManifest is the set of tiered segments, by base position.
type tierManifest struct {
	mu   sync.RWMutex
	segs []*TieredSegment // sorted by Base, not overlapping
}

// apply adds a committed segment from its control payload. A second commit
// of a segment already tiered (a leader that lost the answer to its own
// commit and uploaded again) changes nothing: the first object stays the
// segment's, the other is an orphan for the sweep.
func (m *tierManifest) apply(payload []byte) error {
	if len(payload) < 2 || payload[0] != opTierCommit || payload[1] != 1 {
		return fmt.Errorf("%w: tier commit payload", model.ErrCorruptRecord)
	}
	s, _, err := decodeTieredSegment(payload[2:])
	if err != nil {
		return err
	}
	m.add(s)
	return nil
}

func (m *tierManifest) add(s *TieredSegment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].End > s.Base })
	if i < len(m.segs) && m.segs[i].Base < s.End {
		return // overlaps a segment already tiered
	}
	m.segs = append(m.segs, nil)
	copy(m.segs[i+1:], m.segs[i:])
	m.segs[i] = s
}

// find returns the tiered segment holding log position pos.
func (m *tierManifest) find(pos model.LogPos) *TieredSegment {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].End > pos })
	if i < len(m.segs) && m.segs[i].Base <= pos {
		return m.segs[i]
	}
	return nil
}

// has reports whether a segment beginning at base is tiered.
func (m *tierManifest) has(base model.LogPos) bool {
	s := m.find(base)
	return s != nil && s.Base == base
}

// list returns the tiered segments in log order.
func (m *tierManifest) list() []*TieredSegment {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]*TieredSegment(nil), m.segs...)
}

// The manifest as a state keeper: its section is the list of segments;
// tier commits are control records, applied by applyControl, so Replay
// has nothing to do.

func (m *tierManifest) Name() string { return tierManifestName }

func (m *tierManifest) Capture() ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b := binary.LittleEndian.AppendUint32([]byte{1}, uint32(len(m.segs)))
	for _, s := range m.segs {
		b = encodeTieredSegment(b, s)
	}
	return b, nil
}

func (m *tierManifest) Restore(data []byte) error {
	if len(data) < 5 || data[0] != 1 {
		return fmt.Errorf("%w: tier manifest section", model.ErrCorruptRecord)
	}
	n := binary.LittleEndian.Uint32(data[1:])
	p := data[5:]
	segs := make([]*TieredSegment, 0, min(n, 1<<16))
	for range n {
		s, rest, err := decodeTieredSegment(p)
		if err != nil {
			return err
		}
		segs = append(segs, s)
		p = rest
	}
	m.mu.Lock()
	m.segs = nil
	m.mu.Unlock()
	for _, s := range segs {
		m.add(s)
	}
	return nil
}

func (m *tierManifest) Replay(model.LogPos, *ReplayedRecord) {}
