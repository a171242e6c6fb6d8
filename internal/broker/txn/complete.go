package txn

// Ending transactions: markers, offsets, completion, timeouts and recovery.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// markerRecord is a commit or abort marker for one partition.
func markerRecord(q model.QueueID, pid int64, epoch int16, commit bool, now int64) *storage.Record {
	b := kbatch.AppendControlBatch(nil, pid, epoch, commit, 0, now)
	return &storage.Record{Queue: q, Format: model.FormatKafkaBatchV2, Flags: broker.FlagPayloadOffset, Count: 1,
		Timestamp: now, Payload: b, PayloadTailFrom: kbatch.CRCFrom, PayloadTailCRC: binary.BigEndian.Uint32(b[17:])}
}

// end moves an open transaction to prepared — the prepare record and every
// marker (at markerEpoch) in one append — and completes it; t.mu is held.
func (c *Coordinator) end(ctx context.Context, t *txn, commit bool, markerEpoch int16) error {
	cur := c.status(t)
	next := cur
	next.State = StatePrepareAbort
	if commit {
		next.State = StatePrepareCommit
	}
	next.Epoch = markerEpoch
	if markerEpoch != cur.Epoch {
		next.LastEpoch = cur.Epoch
	}
	markers := c.markers(&next, commit)
	if err := c.persist(ctx, t, next, markers); err != nil {
		return err
	}
	c.markersWritten(&next, markers, commit)
	if err := c.remoteMarkers(ctx, &next, commit); err != nil {
		return err // decided: the sweep completes it
	}
	return c.finish(ctx, t)
}

// remoteMarkers writes a prepared transaction's markers into the partitions
// other replication groups hold.
func (c *Coordinator) remoteMarkers(ctx context.Context, st *Status, commit bool) error {
	if c.opts.Peers == nil {
		return nil
	}
	var remote []Partition
	for _, p := range st.Partitions {
		if c.opts.Peers.Remote(p) {
			remote = append(remote, p)
		}
	}
	if len(remote) == 0 {
		return nil
	}
	if err := c.opts.Peers.WriteMarkers(ctx, remote, st.PID, st.Epoch, commit); err != nil {
		return fmt.Errorf("markers of transaction %s in other groups: %w", st.ID, err)
	}
	return nil
}

// markers builds the markers of a prepared transaction.
func (c *Coordinator) markers(st *Status, commit bool) []*storage.Record {
	now := c.now()
	out := make([]*storage.Record, 0, len(st.Partitions))
	for _, p := range st.Partitions {
		if c.opts.Peers != nil && c.opts.Peers.Remote(p) {
			continue // written by remoteMarkers
		}
		if _, _, _, err := c.engine.Offsets(p.Queue); err != nil {
			continue // the topic was deleted
		}
		out = append(out, markerRecord(p.Queue, st.PID, st.Epoch, commit, now))
	}
	return out
}

// markersWritten closes the transaction in the index of each partition and
// wakes its readers (the last stable offset moved).
func (c *Coordinator) markersWritten(st *Status, markers []*storage.Record, commit bool) {
	for _, m := range markers {
		c.index.End(m.Queue, st.PID, m.BaseOffset, commit)
		c.engine.Wake(m.Queue)
	}
}

// complete writes the markers of a prepared transaction again (after a
// restart or a failure half-way) and finishes it; t.mu is held.
func (c *Coordinator) complete(ctx context.Context, t *txn) error {
	st := c.status(t)
	commit := st.State == StatePrepareCommit
	markers := c.markers(&st, commit)
	if len(markers) > 0 {
		if err := c.engine.Append(ctx, markers); err != nil {
			return err
		}
	}
	c.markersWritten(&st, markers, commit)
	if err := c.remoteMarkers(ctx, &st, commit); err != nil {
		return err
	}
	return c.finish(ctx, t)
}

// finish commits a prepared transaction's offsets (when it commits) and
// records it complete; t.mu is held.
func (c *Coordinator) finish(ctx context.Context, t *txn) error {
	st := c.status(t)
	commit := st.State == StatePrepareCommit
	if commit && len(st.Offsets) > 0 && c.opts.Peers != nil {
		byGroup := map[string][]PendingOffset{}
		for _, o := range st.Offsets {
			byGroup[o.Group] = append(byGroup[o.Group], o)
		}
		for group, offs := range byGroup {
			if err := c.opts.Peers.CommitOffsets(ctx, group, offs); err != nil {
				return fmt.Errorf("commit transactional offsets of %s: %w", group, err)
			}
		}
	} else if commit && len(st.Offsets) > 0 {
		type groupTopic struct {
			group string
			topic model.TopicName
		}
		byTopic := map[groupTopic]map[int32]broker.OffsetCommit{}
		for _, o := range st.Offsets {
			k := groupTopic{o.Group, o.Topic}
			if byTopic[k] == nil {
				byTopic[k] = map[int32]broker.OffsetCommit{}
			}
			byTopic[k][o.Index] = broker.OffsetCommit{Queue: o.Queue, Offset: o.Offset, Metadata: o.Metadata, LeaderEpoch: o.LeaderEpoch}
		}
		for k, offs := range byTopic {
			err := c.b.CommitOffsets(ctx, k.group, k.topic, offs)
			if errors.Is(err, model.ErrUnknownTopic) || errors.Is(err, model.ErrUnknownQueue) {
				continue // the topic went away
			}
			if err != nil {
				return fmt.Errorf("commit transactional offsets of %s: %w", k.group, err)
			}
		}
	}
	next := st
	next.State = StateCompleteAbort
	if commit {
		next.State = StateCompleteCommit
	}
	next.Partitions, next.Groups, next.Offsets, next.StartMs = nil, nil, nil, -1
	return c.persist(ctx, t, next, nil)
}

// run aborts timed-out transactions, retries unfinished ends and forgets
// idle ids, until ctx ends: the coordinator's own decisions, taken on the
// broker's clock, whose effects are state records like any other.
func (c *Coordinator) run(ctx context.Context) {
	tick := time.NewTicker(c.opts.AbortInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.sweep(ctx)
	}
}

// sweep handles every id that needs the coordinator's own action.
func (c *Coordinator) sweep(ctx context.Context) {
	now := c.now()
	c.mu.RLock()
	var due []*txn
	for _, t := range c.txns {
		due = append(due, t)
	}
	c.mu.RUnlock()
	for _, t := range due {
		if ctx.Err() != nil {
			return
		}
		if !t.mu.TryLock() {
			continue // busy: next time
		}
		st := c.status(t)
		var err error
		switch {
		case st.State == StateOngoing && now > st.StartMs+int64(st.TimeoutMs):
			err = c.end(ctx, t, false, min(st.Epoch+1, 32767))
			if err == nil {
				c.log.Info("transaction timed out and was aborted", "transactional_id", st.ID, "pid", st.PID,
					"timeout_ms", st.TimeoutMs, "partitions", len(st.Partitions))
			}
		case st.State == StatePrepareCommit || st.State == StatePrepareAbort:
			err = c.complete(ctx, t)
		case (st.State == StateEmpty || st.State == StateCompleteCommit || st.State == StateCompleteAbort) &&
			now > st.UpdateMs+c.opts.IDExpiration.Milliseconds():
			next := st
			next.Deleted = true
			err = c.persist(ctx, t, next, nil)
		}
		t.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("transaction not ended yet, retrying", "transactional_id", st.ID, "state", st.State.String(), "err", err)
		}
	}
}

// recover completes transactions a restart interrupted and aborts
// transactions the log has open that no open transaction accounts for.
func (c *Coordinator) recover(ctx context.Context) error {
	c.mu.RLock()
	all := make([]*txn, 0, len(c.txns))
	for _, t := range c.txns {
		all = append(all, t)
	}
	c.mu.RUnlock()
	for _, t := range all {
		t.mu.Lock()
		var err error
		st := c.status(t)
		if st.State == StatePrepareCommit || st.State == StatePrepareAbort {
			err = c.complete(ctx, t)
		}
		t.mu.Unlock()
		if err != nil {
			return fmt.Errorf("complete transaction %s: %w", st.ID, err)
		}
	}
	var hanging []*storage.Record
	now := c.now()
	for _, q := range c.engine.QueueIDs() {
		for pid := range c.index.Open(q) {
			c.mu.RLock()
			a := c.active[pid]
			epoch, known := c.epochs[pid]
			c.mu.RUnlock()
			if a != nil && a.queues[q] {
				continue
			}
			if !known && c.opts.Peers != nil && !c.opts.Peers.Sole() {
				continue // coordinated in another replication group
			}
			c.log.Warn("aborting a transaction the log has open but no coordinator state knows", "queue", q, "pid", pid)
			hanging = append(hanging, markerRecord(q, pid, epoch, false, now))
		}
	}
	if len(hanging) > 0 {
		if err := c.engine.Append(ctx, hanging); err != nil {
			return err
		}
		for _, m := range hanging {
			h := kbatch.ReadHeader(m.Payload)
			c.index.End(m.Queue, h.ProducerID, m.BaseOffset, false)
		}
	}
	return nil
}

// Describe returns the state of transactional ids.
func (c *Coordinator) Describe(id string) (Status, error) {
	t := c.lookup(id)
	if t == nil {
		return Status{}, ErrUnknownTransactionalID
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.status(t), nil
}

// List returns every known transactional id's state, filtered by states and
// producer ids when given, sorted by id.
func (c *Coordinator) List(states []State, pids []int64) []Status {
	c.mu.RLock()
	all := make([]*txn, 0, len(c.txns))
	for _, t := range c.txns {
		all = append(all, t)
	}
	c.mu.RUnlock()
	var out []Status
	for _, t := range all {
		st := c.status(t)
		if st.PID < 0 || (len(states) > 0 && !slices.Contains(states, st.State)) || (len(pids) > 0 && !slices.Contains(pids, st.PID)) {
			continue
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Abort aborts a transactional id's open transaction now, as its timeout
// would (an operator resolving a hanging transaction that holds back
// read_committed consumers): the producer's epoch is bumped, so the
// producer is fenced. ErrNotFound when the id has no open transaction.
func (c *Coordinator) Abort(ctx context.Context, id string) error {
	t := c.lookup(id)
	if t == nil {
		return fmt.Errorf("%w: transactional id %q", model.ErrNotFound, id)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := c.status(t)
	switch st.State {
	case StateOngoing:
		if err := c.end(ctx, t, false, min(st.Epoch+1, 32767)); err != nil {
			return err
		}
		c.log.Info("transaction aborted by an operator", "transactional_id", id, "pid", st.PID, "partitions", len(st.Partitions))
		return nil
	case StatePrepareCommit, StatePrepareAbort:
		return c.complete(ctx, t) // already decided: finish it
	}
	return fmt.Errorf("%w: transactional id %q has no open transaction (%s)", model.ErrNotFound, id, st.State.String())
}

// WriteMarkers writes the markers of a transaction another group's
// coordinator decided into this group's partitions of it where the
// producer has the transaction open (none is needed elsewhere; queues this
// broker does not hold are skipped: their topic went away), so a call
// repeated after its first attempt succeeded writes nothing more.
func (c *Coordinator) WriteMarkers(ctx context.Context, parts []Partition, pid int64, epoch int16, commit bool) error {
	var open []Partition
	for _, p := range parts {
		if _, ok := c.index.OpenFirst(p.Queue, pid); ok {
			open = append(open, p)
		}
	}
	st := Status{PID: pid, Epoch: epoch, Partitions: open}
	markers := c.markers(&st, commit)
	if len(markers) == 0 {
		return nil
	}
	if err := c.engine.Append(ctx, markers); err != nil {
		return err
	}
	c.markersWritten(&st, markers, commit)
	return nil
}
