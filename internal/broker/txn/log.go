package txn

// The coordinator's durable state: a StateMachine over the state queues,
// kept by a broker.StateLog (records applied once visible, snapshot records
// in the queues, a checkpoint section).

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// stateSection names the coordinator's checkpoint section.
const stateSection = "broker.kafka-transactions"

// statePartitions is the number of state queues (Kafka's
// __transaction_state has 50 partitions); an id's records go to the queue
// broker.KeyPartition picks, so coordinators can spread over nodes.
const statePartitions = 50

// Keys of the snapshots older versions kept in the metadata store, read
// once to migrate them into the log.
const (
	legacySnapshotPrefix = "txn/ids/"
	legacyAppliedKey     = "txn/applied"
)

func encodeStatus(st *Status) []byte {
	b, _ := json.Marshal(st) // plain data: cannot fail
	return b
}

// decodeStatus parses a stored state, checking what must hold.
func decodeStatus(b []byte) (Status, error) {
	var st Status
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: transaction state: %v", model.ErrCorruptRecord, err)
	}
	if st.ID == "" || st.State < StateEmpty || st.State > StateDead {
		return st, fmt.Errorf("%w: transaction state without an id or with state %d", model.ErrCorruptRecord, st.State)
	}
	return st, nil
}

// partition returns the index of an id's state queue.
func (c *Coordinator) partition(id string) int { return broker.KeyPartition(id, c.partitions) }

// stateRecord is the record of an id's new state.
func (c *Coordinator) stateRecord(st *Status) *storage.Record {
	return c.b.MessageRecord(0, &model.Message{Key: []byte(st.ID), Body: encodeStatus(st)})
}

// decodeStateRecord reads a state record's status.
func decodeStateRecord(payload []byte) (Status, error) {
	m, err := broker.DecodeMessage(payload)
	if err != nil {
		return Status{}, err
	}
	return decodeStatus(m.Body)
}

// Apply implements broker.StateMachine: an id's new state.
func (c *Coordinator) Apply(i int, at model.QueueOffset, payload []byte) {
	st, err := decodeStateRecord(payload)
	if err != nil {
		c.log.Error("corrupt transaction state record skipped", "queue_index", i, "offset", at, "err", err)
		return
	}
	if c.partition(st.ID) != i {
		return // written by a version that kept every id in one queue (migrated)
	}
	c.install(st)
}

// Entries implements broker.StateMachine: the states of queue i's ids, by
// id.
func (c *Coordinator) Entries(i int) [][]byte {
	c.mu.RLock()
	sts := make([]Status, 0, len(c.txns))
	for id, t := range c.txns {
		if c.partition(id) == i && t.st.PID >= 0 { // (not a placeholder of an id being initialised)
			sts = append(sts, t.st)
		}
	}
	c.mu.RUnlock()
	sort.Slice(sts, func(a, b int) bool { return sts[a].ID < sts[b].ID })
	out := make([][]byte, len(sts))
	for j := range sts {
		out[j] = encodeStatus(&sts[j])
	}
	return out
}

// Restore implements broker.StateMachine. Ids kept keep their txn objects
// (an operation may hold one across a snapshot).
func (c *Coordinator) Restore(i int, entries [][]byte) error {
	keep := make(map[string]Status, len(entries))
	for _, e := range entries {
		st, err := decodeStatus(e)
		if err != nil {
			return err
		}
		keep[st.ID] = st
	}
	c.mu.RLock()
	var gone []string
	for id, t := range c.txns {
		if _, ok := keep[id]; !ok && c.partition(id) == i && t.st.PID >= 0 {
			gone = append(gone, id)
		}
	}
	c.mu.RUnlock()
	for _, id := range gone {
		c.install(Status{ID: id, PID: -1, Deleted: true})
	}
	for _, st := range keep {
		if c.partition(st.ID) == i {
			c.install(st)
		}
	}
	return nil
}

// Len implements broker.StateMachine.
func (c *Coordinator) Len(i int) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for id, t := range c.txns {
		if c.partition(id) == i && t.st.PID >= 0 {
			n++
		}
	}
	return n
}

// install applies an id's new state.
func (c *Coordinator) install(st Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txns[st.ID]
	if t == nil {
		if st.Deleted {
			return
		}
		t = &txn{st: Status{ID: st.ID, PID: -1, LastEpoch: -1, StartMs: -1}}
		c.txns[st.ID] = t
	}
	c.applyLocked(t, st)
}

// load restores the state: from the checkpoint's section and the records
// after it, or from the queues alone; a snapshot older versions left in
// the metadata store is migrated into the queues.
func (c *Coordinator) load(ctx context.Context) error {
	migrated, err := c.loadLegacy(ctx)
	if err != nil {
		return err
	}
	if _, err := c.state.Load(); err != nil {
		return err
	}
	if !migrated {
		return nil
	}
	return c.state.FinishMigration(ctx, c.b.Meta(), legacyAppliedKey, legacySnapshotPrefix)
}

// loadLegacy reads the snapshot older versions kept in the metadata store,
// with the records of their single queue (queue 0) after it, as the state
// the queues are then applied on (false when there is none).
func (c *Coordinator) loadLegacy(ctx context.Context) (bool, error) {
	applied, kvs, found, err := broker.LegacySnapshot(ctx, c.b.Meta(), legacyAppliedKey, legacySnapshotPrefix)
	if !found || err != nil {
		return false, err
	}
	for _, kv := range kvs {
		st, err := decodeStatus(kv.Value)
		if err != nil {
			c.log.Error("corrupt transaction snapshot entry skipped", "key", kv.Key, "err", err)
			continue
		}
		c.install(st)
	}
	q0 := c.state.Queues()[0]
	next := applied
	err = c.b.ScanQueue(q0, next, func(r *storage.StoredRecord, m *model.Message) {
		if st, err := decodeStatus(m.Body); err == nil {
			c.install(st)
		}
		next = r.BaseOffset + model.QueueOffset(r.Count)
	})
	if err != nil {
		return false, err
	}
	c.state.SkipTo(0, next)
	return true, nil
}

// validID says whether a transactional id can be a metadata key suffix.
func validID(id string) bool { return id != "" && !strings.ContainsRune(id, 0) }
