package storage

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// Pinned control records. A queue's creation record, its newest start move
// and its compaction holes are state the log alone must still hold after the segments around
// them are reclaimed: a node rebuilt from its log (no checkpoint) learns
// from them which queues exist and where they start. They count as live
// bytes of the queue, so a segment holding one is kept or, when garbage
// collection empties the rest, relocated with its data to the local area
// (and rebuilt from there in origin order, local.go).

// pin is the position and size of a control record a queue still needs.
type pin struct {
	pos  model.LogPos
	size uint32
}

// queuePins are a queue's pinned control records: its creation, its newest
// start move, and the holes compaction made (by base offset) while they
// are retained.
type queuePins struct {
	mu            sync.Mutex
	create, start pin
	holes         map[model.QueueOffset]pin
}

// slot returns the pin of a control record (nil for records never pinned).
func (p *queuePins) slot(payload []byte) *pin {
	if len(payload) == 0 {
		return nil
	}
	switch payload[0] {
	case opCreateQueue:
		return &p.create
	case opSetStart:
		return &p.start
	case opHole:
		if len(payload) != 13 {
			return nil
		}
		base := model.QueueOffset(binary.LittleEndian.Uint64(payload[1:]))
		if p.holes == nil {
			p.holes = map[model.QueueOffset]pin{}
		}
		h := p.holes[base]
		return &h
	}
	return nil
}

// store writes back a hole's pin (slot returns a copy for holes).
func (p *queuePins) store(payload []byte, s *pin) {
	if payload[0] == opHole {
		base := model.QueueOffset(binary.LittleEndian.Uint64(payload[1:]))
		if s.size == 0 {
			delete(p.holes, base)
		} else {
			p.holes[base] = *s
		}
	}
}

// set pins the control record at pos (a creation keeps its first record).
func (p *queuePins) set(payload []byte, pos model.LogPos, size uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.slot(payload); s != nil && (payload[0] != opCreateQueue || s.size == 0) {
		*s = pin{pos, size}
		p.store(payload, s)
	}
}

// holds reports whether the control record at pos is pinned.
func (p *queuePins) holds(payload []byte, pos model.LogPos) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slot(payload)
	return s != nil && s.size != 0 && s.pos == pos
}

// move repins a control record from one position to a copy of it: from
// exactly, or (recovery, from < 0) from origin or any earlier local copy
// of the same size.
func (p *queuePins) move(payload []byte, from, origin, to model.LogPos, size uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slot(payload)
	if s == nil || s.size == 0 {
		return false
	}
	ok := s.pos == from
	if from < 0 {
		ok = s.pos == origin || (s.pos.IsLocal() && s.pos < to && s.size == size)
	}
	if ok {
		*s = pin{to, size}
		p.store(payload, s)
	}
	return ok
}

// bytes adds the pinned bytes to live, by segment; holes below the queue's
// start are no longer needed and are dropped.
func (p *queuePins) bytes(live map[model.LogPos]int64, segmentOf func(model.LogPos) model.LogPos, start model.QueueOffset) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range []pin{p.create, p.start} {
		if s.size != 0 {
			live[segmentOf(s.pos)] += int64(s.size)
		}
	}
	for base, s := range p.holes {
		if base < start {
			delete(p.holes, base)
			continue
		}
		live[segmentOf(s.pos)] += int64(s.size)
	}
}

// pinsSection names the checkpoint section holding every queue's pins.
const pinsSection = "storage.queue-pins"

// encodePins: count u32, then per queue: id u32, create and start pins
// (pos i64, size u32 each), hole count u32 and per hole base i64 and pin.
func encodePins(ids []model.QueueID, qs []*queue) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, uint32(len(ids)))
	for i, id := range ids {
		p := &qs[i].pins
		p.mu.Lock()
		b = le.AppendUint32(b, uint32(id))
		for _, s := range []pin{p.create, p.start} {
			b = le.AppendUint64(b, uint64(s.pos))
			b = le.AppendUint32(b, s.size)
		}
		b = le.AppendUint32(b, uint32(len(p.holes)))
		for base, s := range p.holes {
			b = le.AppendUint64(b, uint64(base))
			b = le.AppendUint64(b, uint64(s.pos))
			b = le.AppendUint32(b, s.size)
		}
		p.mu.Unlock()
	}
	return b
}

// restorePins loads the pins of the checkpoint's queues.
func (e *Engine) restorePins(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	le := binary.LittleEndian
	bad := fmt.Errorf("%w: pins section truncated", model.ErrCorruptRecord)
	if len(data) < 4 {
		return bad
	}
	n := int(le.Uint32(data))
	b := data[4:]
	for range n {
		if len(b) < 32 {
			return bad
		}
		q := e.queues[model.QueueID(le.Uint32(b))]
		create := pin{model.LogPos(le.Uint64(b[4:])), le.Uint32(b[12:])}
		start := pin{model.LogPos(le.Uint64(b[16:])), le.Uint32(b[24:])}
		holes := int(le.Uint32(b[28:]))
		b = b[32:]
		if len(b) < holes*20 {
			return bad
		}
		var hs map[model.QueueOffset]pin
		if holes > 0 {
			hs = make(map[model.QueueOffset]pin, holes)
		}
		for range holes {
			hs[model.QueueOffset(le.Uint64(b))] = pin{model.LogPos(le.Uint64(b[8:])), le.Uint32(b[16:])}
			b = b[20:]
		}
		if q != nil {
			q.pins.create, q.pins.start, q.pins.holes = create, start, hs
		}
	}
	return nil
}

// pinnedControl reports whether the control record r at pos is pinned by
// its queue (so garbage collection must keep it).
func (e *Engine) pinnedControl(r *commitlog.Header, payload []byte, pos model.LogPos) bool {
	if r.Queue == engineQueue {
		return e.keeperPinned(payload, pos)
	}
	q, err := e.queue(r.Queue)
	return err == nil && q.pins.holds(payload, pos)
}
