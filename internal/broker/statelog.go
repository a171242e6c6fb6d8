package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// A StateMachine is broker state kept in internal queues (consumer offsets,
// the Kafka transaction coordinator): it changes only by applying the
// queues' records in order, through a StateLog.
type StateMachine interface {
	// Apply applies one record of queue i (never a snapshot part).
	Apply(i int, offset model.QueueOffset, payload []byte)
	// Entries returns queue i's state as self-contained entries, in a
	// stable order; Restore(i, Entries(i)) must rebuild the same state.
	Entries(i int) [][]byte
	// Restore replaces queue i's state with entries.
	Restore(i int, entries [][]byte) error
	// Len is the number of entries queue i's state has (snapshot cadence).
	Len(i int) int
}

// StateLog keeps a StateMachine in internal queues. Writers append with
// Write (the record takes effect once visible: durable in sync mode,
// written in async mode, committed in a cluster); a queueApplier applies
// each queue in order, at run time and on restart alike. A snapshot record
// of a queue's state (one or more parts appended together) replaces that
// state when applied, so older records can be trimmed while the log alone
// still rebuilds everything; the engine's checkpoint carries a section with
// the state as of the applied offsets, so a restart replays only the tail.
//
// Snapshot parts are FormatInternal records whose payload starts with
// snapshotPartMark (a state machine's own internal records never do):
//
//	mark u8 | last u8 | n u32 | n × { len u32 | entry }
//
// The checkpoint section: n u32 | n × next offset i64 | n × { count u32 |
// count × { len u32 | entry } }.
type StateLog struct {
	engine    *storage.Engine
	name      string
	queues    []model.QueueID
	sm        StateMachine
	log       *slog.Logger
	now       func() time.Time
	applier   *queueApplier
	partBytes int // the size a snapshot part is cut at
	// atWrite: writers apply their records themselves as they append them
	// (state the next request needs before the record is durable, such as
	// POP leases); the applier applies records only on Load.
	atWrite bool

	// changeMu is held shared by writers from append until the append
	// returns, exclusively by a snapshot, so nothing lands between the
	// state a snapshot encodes and the snapshot.
	changeMu sync.RWMutex

	mu       sync.Mutex // guards the cadence fields; taken inside applier.mu
	since    []int
	lastSnap []time.Time
	parts    [][][]byte // per queue: entries of a snapshot being applied
}

// snapshotPartMark starts a snapshot part's payload.
const snapshotPartMark = 0xff

// Snapshot cadence: a queue gets a snapshot record (and its older records
// can go) once it has applied as many records since its last one as its
// state has entries (so snapshots cost no more than the log they free), at
// least snapshotMinRecords, or any number after snapshotMaxAge.
const (
	snapshotMinRecords = 100
	snapshotMaxAge     = 10 * time.Minute
	snapshotPartBytes  = 1 << 20
)

// NewStateLog returns a StateLog over queues; Load restores it.
func (b *Broker) NewStateLog(name string, queues []model.QueueID, sm StateMachine) *StateLog {
	l := &StateLog{engine: b.engine, name: name, queues: queues, sm: sm, log: b.log.With("state", name), now: b.opts.Now, partBytes: snapshotPartBytes,
		since: make([]int, len(queues)), lastSnap: make([]time.Time, len(queues)), parts: make([][][]byte, len(queues))}
	for i := range l.lastSnap {
		l.lastSnap[i] = l.now()
	}
	l.applier = newQueueApplier(b.engine, queues, l.apply)
	b.stateLogsMu.Lock()
	b.stateLogs = append(b.stateLogs, l)
	b.stateLogsMu.Unlock()
	return l
}

// SettleStates waits until every record already written to a state log
// is visible and applied, so that what the state machines hold reflects
// everything appended before the call (dumps and tests compare that).
func (b *Broker) SettleStates(ctx context.Context) error {
	b.stateLogsMu.Lock()
	logs := slices.Clone(b.stateLogs)
	b.stateLogsMu.Unlock()
	for _, l := range logs {
		if err := l.settle(ctx); err != nil {
			return fmt.Errorf("state %s: %w", l.name, err)
		}
	}
	return nil
}

// settle waits until every queue's written records are visible, then
// applies them (writers that apply their own records already did).
func (l *StateLog) settle(ctx context.Context) error {
	for _, q := range l.queues {
		for {
			_, hw, end, err := l.engine.Offsets(q)
			if err != nil {
				return err
			}
			if hw >= end {
				break
			}
			if err := l.engine.Wait(ctx, map[model.QueueID]model.QueueOffset{q: hw}); err != nil {
				return err
			}
		}
	}
	if l.atWrite {
		return nil
	}
	return l.applier.catchUpAll()
}

// SnapshotStates snapshots every state log's queues now and trims the
// records below each snapshot (what the periodic check does when a queue
// is due).
func (b *Broker) SnapshotStates(ctx context.Context) error {
	b.stateLogsMu.Lock()
	logs := slices.Clone(b.stateLogs)
	b.stateLogsMu.Unlock()
	var errs []error
	for _, l := range logs {
		errs = append(errs, l.SnapshotAll(ctx, true))
	}
	return errors.Join(errs...)
}

// Queues returns the state's queues.
func (l *StateLog) Queues() []model.QueueID { return l.queues }

// ApplyAtWrite makes writers apply their own records (WriteApplied) as
// they append them, in each queue's order for what they touch, instead of
// once the records are visible; replay after a restart applies them from
// the log as usual. It is for state the next request depends on before the
// record is durable, which is then rolled back with the log (a crash loses
// both).
func (l *StateLog) ApplyAtWrite() { l.atWrite = true }

// Shared holds off snapshots and checkpoints until the returned function
// is called: writers in ApplyAtWrite mode hold it across reading the state,
// WriteApplied and applying, taking it before any lock of their own (a
// snapshot takes it exclusively, then reads the state under those locks).
func (l *StateLog) Shared() (release func()) {
	l.changeMu.RLock()
	return l.changeMu.RUnlock
}

// WriteApplied appends records to queue i and calls apply, which applies
// them to the state machine (ApplyAtWrite mode; the caller holds Shared).
func (l *StateLog) WriteApplied(ctx context.Context, i int, recs []*storage.Record, opts storage.AppendOptions, apply func()) error {
	for _, r := range recs {
		r.Queue = l.queues[i]
	}
	if err := l.engine.AppendWith(ctx, recs, opts); err != nil {
		return err
	}
	apply()
	l.mu.Lock()
	l.since[i] += len(recs)
	l.mu.Unlock()
	return nil
}

func (l *StateLog) apply(i int, at model.QueueOffset, payload []byte) {
	if len(payload) == 0 || payload[0] != snapshotPartMark {
		l.mu.Lock()
		l.since[i]++
		l.mu.Unlock()
		l.sm.Apply(i, at, payload)
		return
	}
	last, entries, err := decodeEntries(payload[1:])
	if err != nil {
		l.log.Error("skipping bad snapshot part", "queue", l.queues[i], "offset", at, "err", err)
		return
	}
	l.mu.Lock()
	for _, e := range entries {
		// Copied: a snapshot's parts may span reads, and a read's bytes
		// are the log's mapped pages, valid only until it is released.
		l.parts[i] = append(l.parts[i], append([]byte(nil), e...))
	}
	var all [][]byte
	if last {
		all, l.parts[i], l.since[i], l.lastSnap[i] = l.parts[i], nil, 0, l.now()
	}
	l.mu.Unlock()
	if last {
		if err := l.sm.Restore(i, all); err != nil {
			l.log.Error("bad snapshot", "queue", l.queues[i], "offset", at, "err", err)
		}
	}
}

// appendEntries encodes last | n | entries.
func appendEntries(b []byte, last bool, entries [][]byte) []byte {
	le := binary.LittleEndian
	flag := byte(0)
	if last {
		flag = 1
	}
	b = append(b, flag)
	b = le.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = le.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

// decodeEntries parses appendEntries.
func decodeEntries(b []byte) (last bool, entries [][]byte, err error) {
	r := &msgReader{b: b}
	if v := r.take(1); v != nil {
		last = v[0] == 1
	}
	n := int(r.u32())
	if n > len(b) {
		return false, nil, fmt.Errorf("%w: %d entries in %d bytes", model.ErrCorruptRecord, n, len(b))
	}
	entries = make([][]byte, 0, n)
	for range n {
		e := r.take(int(r.u32()))
		if r.err != nil {
			break
		}
		entries = append(entries, e)
	}
	return last, entries, r.err
}

// Write appends records to queue i (their payloads are the state
// machine's), then extra records of other queues in the same append, and,
// unless opts asks for no wait, applies what is visible — with the
// durability wait, the records themselves.
func (l *StateLog) Write(ctx context.Context, i int, recs, extra []*storage.Record, opts storage.AppendOptions) error {
	for _, r := range recs {
		r.Queue = l.queues[i]
	}
	if len(extra) > 0 {
		recs = append(append(make([]*storage.Record, 0, len(recs)+len(extra)), recs...), extra...)
	}
	l.changeMu.RLock()
	err := l.engine.AppendWith(ctx, recs, opts)
	l.changeMu.RUnlock()
	if err != nil || opts.NoWait || opts.Deferred {
		return err // the applier's loop applies them once visible
	}
	return l.applier.catchUp(i)
}

// Load restores the state from the checkpoint's section (or nothing) and
// applies the queues from there, and registers the section for later
// checkpoints. restored says whether the section was used.
func (l *StateLog) Load() (restored bool, err error) {
	l.applier.mu.Lock()
	restored = l.restoreSection()
	l.applier.mu.Unlock()
	if err := l.applier.catchUpAll(); err != nil {
		return restored, err
	}
	l.engine.AddCheckpointSection(l.name, l.capture)
	return restored, nil
}

// Run applies records as they become visible (unless writers apply them)
// and snapshots queues on cadence every interval, until ctx ends.
func (l *StateLog) Run(ctx context.Context, interval time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if l.atWrite {
			return
		}
		if err := l.applier.run(ctx); err != nil {
			l.log.Error("applier stopped", "err", err)
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			return
		case <-t.C:
			if err := l.SnapshotAll(ctx, false); err != nil && ctx.Err() == nil {
				l.log.Warn("state snapshot failed", "err", err)
			}
		}
	}
}

// restoreSection loads the checkpoint's section (applier.mu held).
func (l *StateLog) restoreSection() bool {
	data, ok := l.engine.CheckpointSection(l.name)
	if !ok {
		return false
	}
	le := binary.LittleEndian
	n := len(l.queues)
	if len(data) < 4 || int(le.Uint32(data)) != n || len(data) < 4+8*n {
		l.log.Warn("checkpoint section does not fit; replaying the queues")
		return false
	}
	next := make([]model.QueueOffset, n)
	for i := range next {
		next[i] = model.QueueOffset(le.Uint64(data[4+8*i:]))
	}
	r := &msgReader{b: data[4+8*n:]}
	perQueue := make([][][]byte, n)
	for i := range perQueue {
		count := int(r.u32())
		if count > len(data) {
			r.err = fmt.Errorf("%w: %d entries", model.ErrCorruptRecord, count)
		}
		for j := 0; j < count && r.err == nil; j++ {
			perQueue[i] = append(perQueue[i], r.take(int(r.u32())))
		}
	}
	if r.err != nil {
		l.log.Warn("checkpoint section unreadable; replaying the queues", "err", r.err)
		return false
	}
	for i, entries := range perQueue {
		if err := l.sm.Restore(i, entries); err != nil {
			l.log.Warn("checkpoint section unreadable; replaying the queues", "err", err)
			for j := range l.queues {
				_ = l.sm.Restore(j, nil)
			}
			return false
		}
	}
	copy(l.applier.next, next)
	return true
}

// capture is the checkpoint section: the state exactly as of the applied
// offsets.
func (l *StateLog) capture() ([]byte, error) {
	next := l.applier.next
	if l.atWrite {
		// Writers apply as they append: with none appending, the state
		// reflects every record written.
		l.changeMu.Lock()
		defer l.changeMu.Unlock()
		next = make([]model.QueueOffset, len(l.queues))
		for i, q := range l.queues {
			_, _, end, err := l.engine.Offsets(q)
			if err != nil {
				return nil, err
			}
			next[i] = end
		}
	} else {
		l.applier.mu.Lock()
		defer l.applier.mu.Unlock()
	}
	le := binary.LittleEndian
	b := le.AppendUint32(nil, uint32(len(l.queues)))
	for _, n := range next {
		b = le.AppendUint64(b, uint64(n))
	}
	for i := range l.queues {
		entries := l.sm.Entries(i)
		b = le.AppendUint32(b, uint32(len(entries)))
		for _, e := range entries {
			b = le.AppendUint32(b, uint32(len(e)))
			b = append(b, e...)
		}
	}
	return b, nil
}

// SnapshotAll writes a snapshot record into every queue whose cadence says
// so (every queue when force is set) and trims the records below it.
func (l *StateLog) SnapshotAll(ctx context.Context, force bool) error {
	var errs []error
	for i := range l.queues {
		entries := l.sm.Len(i)
		l.mu.Lock()
		due := force || l.since[i] >= max(snapshotMinRecords, entries) ||
			l.since[i] > 0 && l.now().Sub(l.lastSnap[i]) >= snapshotMaxAge
		l.mu.Unlock()
		if due {
			errs = append(errs, l.snapshotQueue(ctx, i))
		}
	}
	return errors.Join(errs...)
}

// snapshotQueue appends a snapshot of queue i's state, as of everything
// before it in the queue, and trims the queue to it.
func (l *StateLog) snapshotQueue(ctx context.Context, i int) error {
	at, err := l.appendSnapshot(ctx, i)
	if err != nil {
		return err
	}
	// Trimmed with no lock of the StateLog held: a start move waits for the
	// engine's checkpoint lock, and a checkpoint takes ours to capture.
	return l.engine.SetStartOffset(l.queues[i], at)
}

// appendSnapshot appends a snapshot of queue i's state, with no writer
// appending, and returns its offset.
func (l *StateLog) appendSnapshot(ctx context.Context, i int) (model.QueueOffset, error) {
	q := l.queues[i]
	l.changeMu.Lock()
	defer l.changeMu.Unlock()
	// No writer is appending: apply every record already written (writers
	// that apply their own records already did).
	for !l.atWrite {
		_, _, end, err := l.engine.Offsets(q)
		if err != nil {
			return 0, err
		}
		if err := l.applier.catchUp(i); err != nil {
			return 0, err
		}
		l.applier.mu.Lock()
		next := l.applier.next[i]
		l.applier.mu.Unlock()
		if next >= end {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = l.engine.Wait(wctx, map[model.QueueID]model.QueueOffset{q: next})
		cancel()
		if err != nil {
			return 0, err
		}
	}
	entries := l.sm.Entries(i)
	var recs []*storage.Record
	for len(entries) > 0 || len(recs) == 0 {
		n, size := 0, 0
		for n < len(entries) && (n == 0 || size < l.partBytes) {
			size += 4 + len(entries[n])
			n++
		}
		payload := appendEntries([]byte{snapshotPartMark}, n == len(entries), entries[:n])
		recs = append(recs, &storage.Record{Queue: q, Format: model.FormatInternal, Count: 1, Payload: payload})
		entries = entries[n:]
	}
	if err := l.engine.AppendWith(ctx, recs, storage.AppendOptions{}); err != nil {
		return 0, err
	}
	if l.atWrite {
		l.mu.Lock()
		l.since[i], l.lastSnap[i] = 0, l.now()
		l.mu.Unlock()
	} else if err := l.applier.catchUp(i); err != nil {
		return 0, err
	}
	return recs[0].BaseOffset, nil
}

// SkipTo makes queue i's application start at next at the earliest: the
// records below were applied another way (a migration from an older
// layout).
func (l *StateLog) SkipTo(i int, next model.QueueOffset) {
	l.applier.mu.Lock()
	defer l.applier.mu.Unlock()
	l.applier.next[i] = max(l.applier.next[i], next)
}

// LegacySnapshot reads a snapshot an older version kept in the metadata
// store: the queue offset it was applied to (at appliedKey) and its
// entries (under prefix); found is false when there is none.
func LegacySnapshot(ctx context.Context, m meta.Store, appliedKey, prefix string) (applied model.QueueOffset, kvs []meta.KV, found bool, err error) {
	kv, err := m.Get(ctx, appliedKey)
	if errors.Is(err, meta.ErrNotFound) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, err
	}
	n, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("%s: %w", appliedKey, err)
	}
	kvs, err = m.List(ctx, prefix)
	return model.QueueOffset(n), kvs, err == nil, err
}

// FinishMigration writes a snapshot record into every queue — the state
// migrated from an older version's metadata-store snapshot is now in the
// log — and deletes that snapshot's keys.
func (l *StateLog) FinishMigration(ctx context.Context, m meta.Store, appliedKey, prefix string) error {
	if err := l.SnapshotAll(ctx, true); err != nil {
		return fmt.Errorf("migrate %s: %w", l.name, err)
	}
	ops := []meta.Op{{Key: appliedKey, Delete: true}}
	kvs, err := m.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		ops = append(ops, meta.Op{Key: kv.Key, Delete: true})
	}
	_, err = m.Txn(ctx, nil, ops)
	return err
}
