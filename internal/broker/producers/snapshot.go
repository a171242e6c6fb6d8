package producers

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/rosettamq/rosetta/internal/model"
)

// The snapshot (little endian), written into engine checkpoints:
//
//	version u8 (1) | state count u32 |
//	count × { queue u32 | producer id i64 | epoch i16 | last used i64 | batch count u8 |
//	          batches × { epoch i16 | first seq i32 | last seq i32 | base offset i64 } }
//
// The checkpoint around it carries the checksum.
const (
	snapshotVersion = 1
	stateFixedSize  = 4 + 8 + 2 + 8 + 1
	batchSize       = 2 + 4 + 4 + 8
)

// Capture implements storage.StateKeeper. It first forgets expired
// producers. Each state is read under its lock, so an append in progress on
// it (check, append, record) is captured whole.
func (m *Manager) Capture() ([]byte, error) {
	m.mu.Lock()
	m.expireLocked()
	m.mu.Unlock()
	return m.captureSorted()
}

// captureSorted encodes every state in (queue, producer) order.
func (m *Manager) captureSorted() ([]byte, error) {
	m.mu.Lock()
	keys := make([]key, 0, len(m.states))
	for k := range m.states {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.queue != b.queue {
			return cmp.Compare(a.queue, b.queue)
		}
		return cmp.Compare(a.pid, b.pid)
	})
	states := make([]*State, len(keys))
	for i, k := range keys {
		states[i] = m.states[k]
	}
	m.mu.Unlock()
	le := binary.LittleEndian
	b := make([]byte, 5, 5+len(states)*(stateFixedSize+2*batchSize))
	b[0] = snapshotVersion
	n := uint32(0)
	for i, st := range states {
		st.mu.Lock()
		if len(st.batches) > 0 {
			b = le.AppendUint32(b, uint32(keys[i].queue))
			b = le.AppendUint64(b, uint64(keys[i].pid))
			b = le.AppendUint16(b, uint16(st.epoch))
			b = le.AppendUint64(b, uint64(st.lastUsed))
			b = append(b, byte(len(st.batches)))
			for _, bt := range st.batches {
				b = le.AppendUint16(b, uint16(bt.Epoch))
				b = le.AppendUint32(b, uint32(bt.FirstSeq))
				b = le.AppendUint32(b, uint32(bt.LastSeq))
				b = le.AppendUint64(b, uint64(bt.BaseOffset))
			}
			n++
		}
		st.mu.Unlock()
	}
	le.PutUint32(b[1:], n)
	return b, nil
}

// Restore implements storage.StateKeeper: the states become the
// snapshot's (none for an empty one).
func (m *Manager) Restore(data []byte) error {
	states := map[key]*State{}
	if len(data) > 0 {
		var err error
		if states, err = decodeSnapshot(data); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states = make(map[key]*State, len(states))
	m.logNow.Store(0)
	for k, st := range states {
		st.m, st.k = m, k
		m.states[k] = st
		if st.lastUsed > m.logNow.Load() {
			m.logNow.Store(st.lastUsed)
		}
	}
	return nil
}

// decodeSnapshot parses a snapshot, checking every length.
func decodeSnapshot(data []byte) (map[key]*State, error) {
	le := binary.LittleEndian
	bad := func(what string) error { return fmt.Errorf("%w: producer snapshot: %s", model.ErrCorruptRecord, what) }
	if len(data) < 5 {
		return nil, bad("short header")
	}
	if data[0] != snapshotVersion {
		return nil, fmt.Errorf("%w: producer snapshot version %d", model.ErrUnsupportedVersion, data[0])
	}
	n := le.Uint32(data[1:])
	if int64(n)*stateFixedSize > int64(len(data)) {
		return nil, bad("state count")
	}
	b := data[5:]
	out := make(map[key]*State, n)
	for i := uint32(0); i < n; i++ {
		if len(b) < stateFixedSize {
			return nil, bad("truncated state")
		}
		k := key{queue: model.QueueID(le.Uint32(b)), pid: int64(le.Uint64(b[4:]))}
		st := &State{epoch: int16(le.Uint16(b[12:])), lastUsed: int64(le.Uint64(b[14:]))}
		nb := int(b[22])
		b = b[stateFixedSize:]
		if nb > keepBatches || len(b) < nb*batchSize {
			return nil, bad("batches")
		}
		st.batches = make([]Batch, nb, keepBatches)
		for j := range st.batches {
			st.batches[j] = Batch{Epoch: int16(le.Uint16(b)), FirstSeq: int32(le.Uint32(b[2:])),
				LastSeq: int32(le.Uint32(b[6:])), BaseOffset: model.QueueOffset(le.Uint64(b[10:]))}
			b = b[batchSize:]
		}
		out[k] = st
	}
	if len(b) != 0 {
		return nil, bad("trailing bytes")
	}
	return out, nil
}
