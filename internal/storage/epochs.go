package storage

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/rosettamq/rosetta/internal/model"
)

// Leader epochs per queue (Kafka's leader-epoch cache, KIP-101/KIP-279):
// each queue remembers the first offset written in each epoch, where an
// epoch is the term of the records (model.Term.LeaderEpoch). The list only
// grows at appends and shrinks at truncation; it is saved in a checkpoint
// section and rebuilt from the terms of replayed records, so it is a
// function of the log.

// epochsSection names the checkpoint section holding every queue's epochs.
const epochsSection = "storage.queue-epochs"

// EpochStart is where a leader epoch begins in one queue.
type EpochStart struct {
	Epoch model.Epoch
	Start model.QueueOffset
}

// epochCache is one queue's list of epoch starts, ascending in both fields.
type epochCache struct {
	mu      sync.Mutex
	entries []EpochStart
	last    atomic.Int32 // newest epoch noted plus one (0: none), read without mu
}

// note records that a record of epoch ep begins at base; it is a no-op
// unless ep is newer than every epoch seen (so replays are idempotent).
func (c *epochCache) note(ep model.Epoch, base model.QueueOffset) {
	// The common case, an append in the current epoch, takes no lock
	// (appends to one queue are serialised by the log lock).
	if ep < 0 || c.last.Load() > 0 && model.Epoch(c.last.Load()-1) >= ep {
		return
	}
	c.mu.Lock()
	if n := len(c.entries); n == 0 || c.entries[n-1].Epoch < ep {
		c.entries = append(c.entries, EpochStart{Epoch: ep, Start: base})
	}
	c.last.Store(int32(c.entries[len(c.entries)-1].Epoch) + 1)
	c.mu.Unlock()
}

// truncateFrom forgets epochs that begin at or after next (the queue's new
// end after a tail truncation).
func (c *epochCache) truncateFrom(next model.QueueOffset) {
	c.mu.Lock()
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].Start >= next })
	c.entries = c.entries[:i]
	if i > 0 {
		c.last.Store(int32(c.entries[i-1].Epoch) + 1)
	} else {
		c.last.Store(0)
	}
	c.mu.Unlock()
}

func (c *epochCache) snapshot() []EpochStart {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]EpochStart(nil), c.entries...)
}

// LeaderEpoch returns the epoch records appended now are written in.
func (e *Engine) LeaderEpoch() model.Epoch { return e.clog.CurrentTerm().LeaderEpoch() }

// Epochs returns a queue's epoch starts, oldest first, with the current
// epoch last (starting at the queue's end when nothing was written in it
// yet). Starts below the queue's start offset read as the start offset.
func (e *Engine) Epochs(id model.QueueID) ([]EpochStart, error) {
	q, err := e.queue(id)
	if err != nil {
		return nil, err
	}
	list := q.epochs.snapshot()
	start := q.idx.StartOffset()
	// Entries wholly before the start are gone (Kafka truncates its cache
	// from the start as the log start moves); the one covering it begins
	// at the start.
	drop := 0
	for drop+1 < len(list) && list[drop+1].Start <= start {
		drop++
	}
	list = list[drop:]
	if len(list) > 0 && list[0].Start < start {
		list[0].Start = start
	}
	if cur := e.LeaderEpoch(); len(list) == 0 || list[len(list)-1].Epoch < cur {
		list = append(list, EpochStart{Epoch: cur, Start: q.idx.NextOffset()})
	}
	return list, nil
}

// EpochAt returns the epoch of the record holding offset (the current epoch
// at or past the end).
func (e *Engine) EpochAt(id model.QueueID, offset model.QueueOffset) (model.Epoch, error) {
	list, err := e.Epochs(id)
	if err != nil {
		return -1, err
	}
	i := sort.Search(len(list), func(i int) bool { return list[i].Start > offset })
	if i == 0 {
		return list[0].Epoch, nil
	}
	return list[i-1].Epoch, nil
}

// EndOffsetForEpoch answers Kafka's OffsetForLeaderEpoch for one queue: the
// largest epoch at or below the requested one and the offset where the next
// epoch begins (the high watermark for the current epoch). An epoch newer
// than every known one answers (-1, -1); one older than the first known
// answers the requested epoch with the first start.
func (e *Engine) EndOffsetForEpoch(id model.QueueID, requested model.Epoch) (model.Epoch, model.QueueOffset, error) {
	list, err := e.Epochs(id)
	if err != nil {
		return -1, -1, err
	}
	if requested < 0 {
		return -1, -1, nil
	}
	if requested == list[len(list)-1].Epoch {
		_, hw, _, err := e.Offsets(id)
		return requested, hw, err
	}
	higher := sort.Search(len(list), func(i int) bool { return list[i].Epoch > requested })
	switch {
	case higher == len(list):
		return -1, -1, nil
	case higher == 0:
		return requested, list[0].Start, nil
	}
	return list[higher-1].Epoch, list[higher].Start, nil
}

// encodeEpochs lays out: count u32 | count × { queue u32 | n u32 |
// n × { epoch i32 | start i64 } } (little endian).
func encodeEpochs(ids []model.QueueID, lists [][]EpochStart) []byte {
	le := binary.LittleEndian
	out := le.AppendUint32(nil, uint32(len(ids)))
	for i, id := range ids {
		out = le.AppendUint32(out, uint32(id))
		out = le.AppendUint32(out, uint32(len(lists[i])))
		for _, ep := range lists[i] {
			out = le.AppendUint32(out, uint32(ep.Epoch))
			out = le.AppendUint64(out, uint64(ep.Start))
		}
	}
	return out
}

// decodeEpochs parses encodeEpochs.
func decodeEpochs(b []byte) (map[model.QueueID][]EpochStart, error) {
	le := binary.LittleEndian
	bad := fmt.Errorf("%w: checkpoint queue epochs", model.ErrCorruptRecord)
	if len(b) < 4 {
		return nil, bad
	}
	count := le.Uint32(b)
	b = b[4:]
	out := make(map[model.QueueID][]EpochStart, min(count, 1<<16))
	for range count {
		if len(b) < 8 {
			return nil, bad
		}
		id, n := model.QueueID(le.Uint32(b)), int(le.Uint32(b[4:]))
		b = b[8:]
		if len(b) < 12*n {
			return nil, bad
		}
		list := make([]EpochStart, n)
		for i := range list {
			list[i] = EpochStart{Epoch: model.Epoch(le.Uint32(b)), Start: model.QueueOffset(le.Uint64(b[4:]))}
			b = b[12:]
		}
		out[id] = list
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

// restoreEpochs loads the checkpointed epoch lists. A checkpoint written
// before epochs were kept has none: every record then was written in term
// 1, so a queue's one epoch begins at its first retained offset.
func (e *Engine) restoreEpochs(sections map[string][]byte) {
	if data, ok := sections[epochsSection]; ok {
		lists, err := decodeEpochs(data)
		if err == nil {
			for id, list := range lists {
				if q := e.queues[id]; q != nil {
					q.epochs.entries = list
					if n := len(list); n > 0 {
						q.epochs.last.Store(int32(list[n-1].Epoch) + 1)
					}
				}
			}
			return
		}
		e.log.Warn("checkpoint leader epochs unreadable; starting each queue's epoch at its start", "err", err)
	}
	for _, q := range e.queues {
		if start := q.idx.StartOffset(); q.idx.NextOffset() > start {
			q.epochs.note(model.Term(1).LeaderEpoch(), start)
		}
	}
}
