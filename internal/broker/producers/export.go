package producers

import "github.com/rosettamq/rosetta/internal/model"

// Exported is one producer's sequence state in a queue as a queue move
// carries it to the queue's new group, so a batch written before the move
// and sent again after it is still known there as a duplicate.
type Exported struct {
	PID      int64   `json:"p"`
	Epoch    int16   `json:"e"`
	Batches  []Batch `json:"b"`
	LastUsed int64   `json:"u"`
}

// Export returns the states of every producer in a queue.
func (m *Manager) Export(queue model.QueueID) []Exported {
	m.mu.Lock()
	var list []*State
	for k, st := range m.states {
		if k.queue == queue {
			list = append(list, st)
		}
	}
	m.mu.Unlock()
	var out []Exported
	for _, st := range list {
		st.mu.Lock()
		if len(st.batches) > 0 {
			out = append(out, Exported{PID: st.k.pid, Epoch: st.epoch, Batches: append([]Batch(nil), st.batches...), LastUsed: st.lastUsed})
		}
		st.mu.Unlock()
	}
	return out
}

// Import takes exported states for a queue, each where this manager holds
// none of its own for that producer (what it holds is newer). The states
// live in memory: the queue's next batches from each producer are
// recorded in this group's log as usual.
func (m *Manager) Import(queue model.QueueID, states []Exported) {
	for _, ex := range states {
		if len(ex.Batches) == 0 {
			continue
		}
		st := m.Acquire(queue, ex.PID)
		st.Adopt(ex)
		st.Unlock()
	}
}

// Empty reports whether the state holds nothing of its producer (one not
// seen in this queue, or forgotten).
func (s *State) Empty() bool { return len(s.batches) == 0 }

// Adopt takes an exported state when this one is empty (a moved queue's
// producer first seen in its new group).
func (s *State) Adopt(ex Exported) {
	if len(s.batches) > 0 || len(ex.Batches) == 0 {
		return
	}
	s.epoch = ex.Epoch
	s.batches = append(s.batches[:0], ex.Batches[max(0, len(ex.Batches)-keepBatches):]...)
	s.lastUsed = max(s.lastUsed, ex.LastUsed)
}

// ExportOne returns one producer's state in a queue (false: none held).
func (m *Manager) ExportOne(queue model.QueueID, pid int64) (Exported, bool) {
	st := m.Acquire(queue, pid)
	defer st.Unlock()
	if len(st.batches) == 0 {
		return Exported{}, false
	}
	return Exported{PID: pid, Epoch: st.epoch, Batches: append([]Batch(nil), st.batches...), LastUsed: st.lastUsed}, true
}
