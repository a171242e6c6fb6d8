package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

// Live-byte accounting: every queue index knows what its retained entries
// occupy in each log segment (queueindex.SegmentBytes), updated as entries
// are added, dropped and moved. A segment's live bytes are the sum over
// queues; what else it holds is dead. The per-queue figures are saved in
// the checkpoint section below, captured with each queue's state, so a
// restart neither rescans nor double-counts the replayed tail.

// bytesSection names the checkpoint section of the per-queue figures.
const bytesSection = "storage.queue-bytes"

// encodeQueueBytes lays out: count u32 | count × { queue u32 | n u32 |
// n × { segment i64 | bytes i64 } } (little endian).
func encodeQueueBytes(ids []model.QueueID, bytes []queueindex.SegmentBytes) []byte {
	le := binary.LittleEndian
	size := 4
	for _, b := range bytes {
		size += 8 + 16*len(b)
	}
	out := make([]byte, 0, size)
	out = le.AppendUint32(out, uint32(len(ids)))
	for i, id := range ids {
		out = le.AppendUint32(out, uint32(id))
		out = le.AppendUint32(out, uint32(len(bytes[i])))
		for seg, n := range bytes[i] {
			out = le.AppendUint64(out, uint64(seg))
			out = le.AppendUint64(out, uint64(n))
		}
	}
	return out
}

// decodeQueueBytes parses encodeQueueBytes.
func decodeQueueBytes(b []byte) (map[model.QueueID]queueindex.SegmentBytes, error) {
	le := binary.LittleEndian
	bad := fmt.Errorf("%w: checkpoint queue bytes", model.ErrCorruptRecord)
	if len(b) < 4 {
		return nil, bad
	}
	count := le.Uint32(b)
	b = b[4:]
	out := make(map[model.QueueID]queueindex.SegmentBytes, min(count, 1<<16))
	for range count {
		if len(b) < 8 {
			return nil, bad
		}
		id, n := model.QueueID(le.Uint32(b)), int(le.Uint32(b[4:]))
		b = b[8:]
		if len(b) < 16*n {
			return nil, bad
		}
		sb := make(queueindex.SegmentBytes, n)
		for j := range n {
			seg, v := int64(le.Uint64(b[16*j:])), int64(le.Uint64(b[16*j+8:]))
			if seg < 0 || v < 0 {
				return nil, bad
			}
			sb[model.LogPos(seg)] += v
		}
		out[id] = sb
		b = b[16*n:]
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

// SegmentUsage describes one log segment's bytes.
type SegmentUsage struct {
	Base, End model.LogPos
	Live      int64 // bytes of records some queue still retains
	LastTime  int64 // newest store time (ms)
	Sealed    bool
}

// Usage returns every segment's size and live bytes, oldest first: the
// commit log's, then the local area's.
func (e *Engine) Usage() []SegmentUsage {
	live := e.liveBytes()
	segs := append(e.clog.Segments(), e.local.Segments()...)
	out := make([]SegmentUsage, len(segs))
	for i, s := range segs {
		out[i] = SegmentUsage{Base: s.Base, End: s.End, Live: live[s.Base], LastTime: s.LastTime, Sealed: s.Sealed}
	}
	return out
}

// QueueBytes is the size of a queue's retained records.
func (e *Engine) QueueBytes(id model.QueueID) (int64, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, err
	}
	return q.idx.TotalBytes(), nil
}

// queueList snapshots the queues.
func (e *Engine) queueList() []*queue {
	e.qmu.RLock()
	defer e.qmu.RUnlock()
	list := make([]*queue, 0, len(e.queues))
	for _, q := range e.queues {
		list = append(list, q)
	}
	return list
}

// TrimToBytes moves a queue's start so that it keeps at most keep bytes
// (whole records, oldest first; the newest record always stays).
func (e *Engine) TrimToBytes(id model.QueueID, keep int64) error {
	start, err := e.StartKeeping(id, keep)
	if err != nil {
		return err
	}
	return e.SetStartOffset(id, start)
}

// StartKeeping returns the start offset at which a queue keeps at most keep
// bytes (whole records, oldest first; the newest record always stays).
func (e *Engine) StartKeeping(id model.QueueID, keep int64) (model.QueueOffset, error) {
	q, err := e.queue(id)
	if err != nil {
		return 0, err
	}
	return q.idx.StartKeeping(keep)
}
