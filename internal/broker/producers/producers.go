// Package producers keeps idempotent-producer state: producer id allocation
// (durable, never reused after a restart) and, per (producer, queue), the
// sequence numbers of the last batches written, so a retried batch is
// acknowledged with its original offset instead of being written twice and a
// gap is refused.
//
// The state is exactly as durable as the log, the way Kafka's producer
// snapshots are: the Manager is a storage.StateKeeper, so its snapshot is
// written into every engine checkpoint (after the log is synced past every
// batch it reflects) and, on open, the engine replays every batch written
// after that checkpoint through it. A batch written but not acknowledged when
// the broker died is therefore known after the restart, however much other
// producers wrote since. Producers idle longer than the expiration are
// forgotten (Kafka's producer.id.expiration.ms), and the number of states is
// bounded: past the bound the least recently used are dropped.
package producers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
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

type key struct {
	queue model.QueueID
	pid   int64
}

// State is the sequence state of one producer in one queue. Callers hold it
// (Lock/Unlock) across check, append and record.
type State struct {
	mu       sync.Mutex
	m        *Manager
	k        key
	epoch    int16
	batches  []Batch
	lastUsed int64 // store time (unix ms) of the newest batch written
}

// Options configure a Manager.
type Options struct {
	// Expiration forgets a producer's state after this long without a write
	// (Kafka's producer.id.expiration.ms; default one day), measured in the
	// log's own time — the store times of the batches — so every replica
	// and every replay forgets the same producers at the same record.
	Expiration time.Duration
	// MaxStates bounds the (producer, queue) states kept in memory; past it
	// the least recently used are dropped (default 500,000).
	MaxStates int
	Logger    *slog.Logger
	Now       func() time.Time
}

// Manager owns producer ids and states.
type Manager struct {
	store meta.Store
	opts  Options
	log   *slog.Logger

	idMu   sync.Mutex
	nextID int64
	maxID  int64

	mu     sync.Mutex
	states map[key]*State
	// logNow is the log's time: the newest store time of a recorded batch.
	logNow atomic.Int64
}

var _ storage.StateKeeper = (*Manager)(nil)

// New returns a manager allocating ids through store.
func New(store meta.Store, opts Options) *Manager {
	if opts.Expiration <= 0 {
		opts.Expiration = 24 * time.Hour
	}
	if opts.MaxStates <= 0 {
		opts.MaxStates = 500_000
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{store: store, opts: opts, log: opts.Logger.With("component", "producers"), states: map[key]*State{}}
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

// Acquire returns the locked state of a producer in a queue (empty for a
// producer not seen, or forgotten). Release it with Unlock.
func (m *Manager) Acquire(queue model.QueueID, pid int64) *State {
	st := m.state(key{queue, pid})
	st.mu.Lock()
	if st.lastUsed > 0 && m.expired(st.lastUsed) {
		st.epoch, st.batches, st.lastUsed = -1, st.batches[:0], 0 // forgotten, as if new
	}
	return st
}

// expired says whether a state last used at usedAt is past the expiration
// in the log's time.
func (m *Manager) expired(usedAt int64) bool {
	return usedAt < m.logNow.Load()-m.opts.Expiration.Milliseconds()
}

// state returns the state for k, creating it.
func (m *Manager) state(k key) *State {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.states[k]
	if !ok {
		if len(m.states) >= m.opts.MaxStates {
			m.evictLocked()
		}
		st = &State{m: m, k: k, epoch: -1}
		m.states[k] = st
	}
	return st
}

// evictLocked makes room: it drops expired states, then, if still at the
// bound, the least recently used eighth. States in use are kept.
func (m *Manager) evictLocked() {
	m.expireLocked()
	if len(m.states) < m.opts.MaxStates {
		return
	}
	type aged struct {
		k    key
		used int64
	}
	all := make([]aged, 0, len(m.states))
	for k, st := range m.states {
		if st.mu.TryLock() {
			all = append(all, aged{k, st.lastUsed})
			st.mu.Unlock()
		}
	}
	slices.SortFunc(all, func(a, b aged) int {
		return cmp.Or(cmp.Compare(a.used, b.used), cmp.Compare(a.k.queue, b.k.queue), cmp.Compare(a.k.pid, b.k.pid))
	})
	n := min(len(all), max(1, len(m.states)/8))
	for _, a := range all[:n] {
		delete(m.states, a.k)
	}
	m.log.Warn("producer state bound reached; least recently used producers forgotten",
		"max_states", m.opts.MaxStates, "dropped", n)
}

// expireLocked drops the states of producers idle past the expiration in
// the log's time (states Acquire would treat as new anyway).
func (m *Manager) expireLocked() {
	for k, st := range m.states {
		if st.mu.TryLock() {
			if m.expired(st.lastUsed) {
				delete(m.states, k)
			}
			st.mu.Unlock()
		}
	}
}

// Unlock releases the state.
func (s *State) Unlock() { s.mu.Unlock() }

// Check decides what to do with a batch: (offset, true, nil) for a
// duplicate of a written batch, (0, false, nil) to append it, or an error.
func (s *State) Check(epoch int16, firstSeq, lastSeq int32) (model.QueueOffset, bool, error) {
	switch {
	case epoch < s.epoch:
		return 0, false, fmt.Errorf("%w: batch of epoch %d, the producer's is %d", ErrInvalidEpoch, epoch, s.epoch)
	case epoch > s.epoch:
		if firstSeq != 0 && s.epoch >= 0 {
			return 0, false, fmt.Errorf("%w: batch %d-%d of epoch %d, the producer's epoch %d", ErrOutOfOrderSequence,
				firstSeq, lastSeq, epoch, s.epoch)
		}
		if firstSeq != 0 && s.m != nil {
			// Rare outside a restart of a long-running producer; in a
			// cluster it says a replica's state missed the producer.
			s.m.log.Info("idempotent producer not known here; its batch is taken at its sequence",
				"queue", s.k.queue, "producer_id", s.k.pid, "epoch", epoch, "first_sequence", firstSeq)
		}
		return 0, false, nil
	}
	for _, b := range s.batches {
		if b.FirstSeq == firstSeq && b.LastSeq == lastSeq {
			return b.BaseOffset, true, nil
		}
	}
	if n := len(s.batches); n > 0 {
		last := s.batches[n-1]
		if firstSeq != nextSeq(last.LastSeq) {
			return 0, false, fmt.Errorf("%w: batch %d-%d of epoch %d after %d-%d at offset %d", ErrOutOfOrderSequence,
				firstSeq, lastSeq, epoch, last.FirstSeq, last.LastSeq, last.BaseOffset)
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

// Record remembers a written batch; usedAt is its store time (unix ms).
func (s *State) Record(b Batch, usedAt int64) {
	if b.Epoch > s.epoch {
		s.epoch = b.Epoch
		s.batches = s.batches[:0]
	}
	s.batches = append(s.batches, b)
	if len(s.batches) > keepBatches {
		s.batches = append(s.batches[:0], s.batches[len(s.batches)-keepBatches:]...)
	}
	s.lastUsed = max(s.lastUsed, usedAt)
	if s.m != nil {
		s.m.advanceLogTime(usedAt)
	}
}

// advanceLogTime moves the log's time forward to t.
func (m *Manager) advanceLogTime(t int64) {
	for {
		now := m.logNow.Load()
		if t <= now || m.logNow.CompareAndSwap(now, t) {
			return
		}
	}
}

// has reports whether the state already reflects a batch: it is one of the
// remembered batches, or older than the newest of its epoch.
func (s *State) has(b Batch) bool {
	if b.Epoch != s.epoch || len(s.batches) == 0 {
		return b.Epoch < s.epoch
	}
	last := s.batches[len(s.batches)-1].LastSeq
	// A distance below half the sequence space means "not after last"
	// (sequences wrap at MaxInt32).
	d := int64(last) - int64(b.LastSeq)
	return d >= 0 && d < 1<<30
}

// Describe returns the newest batch per producer in a queue.
func (m *Manager) Describe(queue model.QueueID) map[int64]Batch {
	m.mu.Lock()
	list := make(map[int64]*State)
	for k, st := range m.states {
		if k.queue == queue {
			list[k.pid] = st
		}
	}
	m.mu.Unlock()
	out := map[int64]Batch{}
	for pid, st := range list {
		st.mu.Lock()
		if n := len(st.batches); n > 0 {
			out[pid] = st.batches[n-1]
		}
		st.mu.Unlock()
	}
	return out
}

// Len returns the number of (producer, queue) states held.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.states)
}

// Name implements storage.StateKeeper.
func (m *Manager) Name() string { return "kafka-producers" }

// Replay implements storage.StateKeeper: it applies an idempotent Kafka
// batch written after the checkpoint.
func (m *Manager) Replay(_ model.LogPos, r *storage.ReplayedRecord) {
	if r.Format != model.FormatKafkaBatchV2 || len(r.Payload) < kbatch.HeaderSize {
		return
	}
	h := kbatch.ReadHeader(r.Payload)
	if h.ProducerID < 0 || h.Attributes&kbatch.AttrControl != 0 {
		return
	}
	b := Batch{Epoch: h.ProducerEpoch, FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), BaseOffset: r.BaseOffset}
	st := m.Acquire(r.Queue, h.ProducerID)
	defer st.Unlock()
	if !st.has(b) {
		st.Record(b, r.StoreTime)
	}
}
