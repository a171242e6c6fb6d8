// Package producers keeps idempotent-producer state: producer id allocation
// (durable, never reused after a restart) and, per (producer, queue), the
// sequence numbers of the last batches written, so a retried batch is
// acknowledged with its original offset instead of being written twice and a
// gap is refused. The state is derived from the log: after a restart it is
// rebuilt lazily from the newest batches of a queue through a Loader.
package producers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// Errors for sequence checks.
var (
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	ErrInvalidEpoch       = errors.New("invalid producer epoch")
)

// keepBatches is how many recent batches are remembered per producer and
// queue (Kafka's max.in.flight limit for idempotence).
const keepBatches = 5

// Batch is one written batch of a producer.
type Batch struct {
	Epoch      int16
	FirstSeq   int32
	LastSeq    int32
	BaseOffset model.QueueOffset
}

// Loader returns a producer's newest batches in a queue, oldest first, read
// from the log (used once per producer and queue after a restart).
type Loader func(queue model.QueueID, pid int64) []Batch

type key struct {
	queue model.QueueID
	pid   int64
}

// State is the sequence state of one producer in one queue. Callers hold it
// (Lock/Unlock) across check, append and record.
type State struct {
	mu      sync.Mutex
	epoch   int16
	batches []Batch
}

// Manager owns producer ids and states.
type Manager struct {
	store meta.Store
	load  Loader

	idMu   sync.Mutex
	nextID int64
	maxID  int64

	mu     sync.Mutex
	states map[key]*State
}

// New returns a manager allocating ids through store.
func New(store meta.Store, load Loader) *Manager {
	return &Manager{store: store, load: load, states: map[key]*State{}}
}

const idKey = "ids/producer"
const idBlock = 1000

// NewProducerID allocates a fresh producer id. Ids come from the metadata
// store in blocks, so they are never handed out twice, even across restarts.
func (m *Manager) NewProducerID(ctx context.Context) (int64, error) {
	m.idMu.Lock()
	defer m.idMu.Unlock()
	if m.nextID >= m.maxID {
		for {
			var next int64 = 1
			var rev int64
			kv, err := m.store.Get(ctx, idKey)
			if err == nil {
				if next, err = strconv.ParseInt(string(kv.Value), 10, 64); err != nil {
					return 0, fmt.Errorf("producer id counter: %w", err)
				}
				rev = kv.Revision
			} else if !errors.Is(err, meta.ErrNotFound) {
				return 0, err
			}
			_, err = m.store.Txn(ctx, []meta.Compare{{Key: idKey, Revision: rev}},
				[]meta.Op{{Key: idKey, Value: []byte(strconv.FormatInt(next+idBlock, 10))}})
			if errors.Is(err, meta.ErrConflict) {
				continue
			}
			if err != nil {
				return 0, err
			}
			m.nextID, m.maxID = next, next+idBlock
			break
		}
	}
	id := m.nextID
	m.nextID++
	return id, nil
}

// Acquire returns the locked state of a producer in a queue, loading it from
// the log the first time. Release it with Unlock.
func (m *Manager) Acquire(queue model.QueueID, pid int64) *State {
	k := key{queue, pid}
	m.mu.Lock()
	st, ok := m.states[k]
	if !ok {
		st = &State{epoch: -1}
		m.states[k] = st
		st.mu.Lock()
		m.mu.Unlock()
		if m.load != nil {
			st.batches = m.load(queue, pid)
			if n := len(st.batches); n > 0 {
				st.epoch = st.batches[n-1].Epoch
				if n > keepBatches {
					st.batches = st.batches[n-keepBatches:]
				}
			}
		}
		return st
	}
	m.mu.Unlock()
	st.mu.Lock()
	return st
}

// Unlock releases the state.
func (s *State) Unlock() { s.mu.Unlock() }

// Check decides what to do with a batch: (offset, true, nil) for a
// duplicate of a written batch, (0, false, nil) to append it, or an error.
func (s *State) Check(epoch int16, firstSeq, lastSeq int32) (model.QueueOffset, bool, error) {
	switch {
	case epoch < s.epoch:
		return 0, false, ErrInvalidEpoch
	case epoch > s.epoch:
		if firstSeq != 0 && s.epoch >= 0 {
			return 0, false, ErrOutOfOrderSequence
		}
		return 0, false, nil
	}
	for _, b := range s.batches {
		if b.Epoch == epoch && b.FirstSeq == firstSeq && b.LastSeq == lastSeq {
			return b.BaseOffset, true, nil
		}
	}
	if n := len(s.batches); n > 0 {
		last := s.batches[n-1].LastSeq
		if firstSeq != nextSeq(last) {
			return 0, false, ErrOutOfOrderSequence
		}
	}
	return 0, false, nil
}

// nextSeq is the sequence after s (sequences wrap at MaxInt32).
func nextSeq(s int32) int32 {
	if s == 1<<31-1 {
		return 0
	}
	return s + 1
}

// Record remembers a written batch.
func (s *State) Record(b Batch) {
	if b.Epoch > s.epoch {
		s.epoch = b.Epoch
		s.batches = s.batches[:0]
	}
	s.batches = append(s.batches, b)
	if len(s.batches) > keepBatches {
		s.batches = append(s.batches[:0], s.batches[len(s.batches)-keepBatches:]...)
	}
}

// Describe returns the newest batch per producer in a queue.
func (m *Manager) Describe(queue model.QueueID) map[int64]Batch {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int64]Batch{}
	for k, st := range m.states {
		if k.queue != queue {
			continue
		}
		st.mu.Lock()
		if n := len(st.batches); n > 0 {
			out[k.pid] = st.batches[n-1]
		}
		st.mu.Unlock()
	}
	return out
}
