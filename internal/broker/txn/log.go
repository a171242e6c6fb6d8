package txn

// The coordinator's durable state: records in the state queue and
// snapshots in the metadata store.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

const (
	snapshotPrefix = "txn/ids/"
	appliedKey     = "txn/applied"
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

// load restores the snapshot and replays the state queue after it.
func (c *Coordinator) load(ctx context.Context) error {
	var applied model.QueueOffset
	if kv, err := c.b.Meta().Get(ctx, appliedKey); err == nil {
		n, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("transaction snapshot position: %w", err)
		}
		applied = model.QueueOffset(n)
	} else if !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	kvs, err := c.b.Meta().List(ctx, snapshotPrefix)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		st, err := decodeStatus(kv.Value)
		if err != nil {
			c.log.Error("corrupt transaction snapshot entry skipped", "key", kv.Key, "err", err)
			continue
		}
		c.install(st)
	}
	n := 0
	err = c.b.ScanQueue(c.queue, applied, func(r *storage.StoredRecord, m *model.Message) {
		st, err := decodeStatus(m.Body)
		if err != nil {
			c.log.Error("corrupt transaction state record skipped", "offset", r.BaseOffset, "err", err)
			return
		}
		c.install(st)
		n++
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.dirty = map[string]bool{}
	if n > 0 {
		for id := range c.txns {
			c.dirty[id] = true
		}
	}
	c.mu.Unlock()
	return nil
}

// install applies a loaded state.
func (c *Coordinator) install(st Status) {
	c.mu.Lock()
	t := c.txns[st.ID]
	if t == nil {
		t = &txn{st: Status{ID: st.ID, PID: -1, LastEpoch: -1, StartMs: -1}}
		c.txns[st.ID] = t
	}
	c.mu.Unlock()
	c.apply(t, st)
	if st.Deleted {
		c.mu.Lock()
		c.dirty[st.ID] = true
		c.mu.Unlock()
	}
}

// snapshot writes the states changed since the last one and lets the state
// queue drop the records before it.
func (c *Coordinator) snapshot(ctx context.Context) error {
	c.changeMu.Lock()
	_, hw, _, err := c.engine.Offsets(c.queue)
	if err != nil {
		c.changeMu.Unlock()
		return err
	}
	c.mu.Lock()
	ops := make([]meta.Op, 0, len(c.dirty)+1)
	for id := range c.dirty {
		key := snapshotPrefix + id
		if t, ok := c.txns[id]; ok {
			ops = append(ops, meta.Op{Key: key, Value: encodeStatus(&t.st)})
		} else {
			ops = append(ops, meta.Op{Key: key, Delete: true})
		}
	}
	c.dirty = map[string]bool{}
	c.mu.Unlock()
	c.changeMu.Unlock()
	if len(ops) == 0 {
		return nil
	}
	ops = append(ops, meta.Op{Key: appliedKey, Value: []byte(strconv.FormatInt(int64(hw), 10))})
	if _, err := c.b.Meta().Txn(ctx, nil, ops); err != nil {
		return err
	}
	return c.engine.SetStartOffset(c.queue, hw)
}

// validID says whether a transactional id can be a metadata key suffix.
func validID(id string) bool { return id != "" && !strings.ContainsRune(id, 0) }
