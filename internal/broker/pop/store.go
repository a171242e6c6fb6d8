package pop

// The engine's durable state: records in the internal queue
// system/internal/pop, kept by a broker.StateLog in its apply-at-write mode
// (a receive is applied as it is written: the next receive must not hand
// the same message out), with snapshot records in the queue and a
// checkpoint section; a restart applies the records after them.

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// StateTopic is the internal topic of POP state records.
var StateTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "pop"}

const (
	recReceive = 1 // read only: written before receives carried the base
	recAck     = 2
	recChange  = 3
	// recReceiveFrom is a receive carrying the state's base when it was
	// written: a state first met in a replay starts where it started then
	// (not at the group's committed offset at replay time).
	recReceiveFrom = 4
	// recReset moves a group's state on a queue to an offset: every lease
	// and acknowledgement above is forgotten (a consumer's seek).
	recReset = 5
	// recForget drops a group's state on a queue: the next receive
	// starts again from the group's committed offset (a deleted
	// subscription made anew).
	recForget = 6
	// recAcquire and recSettle are share groups' acquisitions and
	// acknowledgements (share.go).
	recAcquire = 7
	recSettle  = 8

	// stateSection names the engine's checkpoint section.
	stateSection = "broker.pop"

	legacySnapshotPrefix = "pop/states/"
	legacyAppliedKey     = "pop/applied"
)

type leaseRecord struct {
	offset   model.QueueOffset
	deadline int64
	attempts int32
	gen      uint32
}

type receiveRecord struct {
	group    string
	queue    model.QueueID
	base     model.QueueOffset // -1 in records written before receives carried it
	next     model.QueueOffset
	leases   []leaseRecord
	filtered []model.QueueOffset
}

type ackRecord struct {
	group  string
	queue  model.QueueID
	offset model.QueueOffset
	gen    uint32
}

type changeRecord struct {
	group       string
	queue       model.QueueID
	offset      model.QueueOffset
	oldGen, gen uint32
	deadline    int64
}

// resetRecord moves a (group, queue) state to offset.
type resetRecord struct {
	group  string
	queue  model.QueueID
	offset model.QueueOffset
}

func (r *resetRecord) encode() []byte {
	return le.AppendUint64(appendHead(nil, recReset, r.group, r.queue), uint64(r.offset))
}

// forgetRecord drops a (group, queue) state.
type forgetRecord struct {
	group string
	queue model.QueueID
}

func (r *forgetRecord) encode() []byte { return appendHead(nil, recForget, r.group, r.queue) }

var le = binary.LittleEndian

func appendHead(b []byte, typ byte, group string, q model.QueueID) []byte {
	b = append(b, typ)
	b = le.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	return le.AppendUint32(b, uint32(q))
}

func (r *receiveRecord) encode() []byte {
	b := appendHead(nil, recReceiveFrom, r.group, r.queue)
	b = le.AppendUint64(b, uint64(r.base))
	b = le.AppendUint64(b, uint64(r.next))
	b = le.AppendUint32(b, uint32(len(r.leases)))
	for _, l := range r.leases {
		b = le.AppendUint64(b, uint64(l.offset))
		b = le.AppendUint64(b, uint64(l.deadline))
		b = le.AppendUint32(b, uint32(l.attempts))
		b = le.AppendUint32(b, l.gen)
	}
	b = le.AppendUint32(b, uint32(len(r.filtered)))
	for _, off := range r.filtered {
		b = le.AppendUint64(b, uint64(off))
	}
	return b
}

func (r *ackRecord) encode() []byte {
	b := appendHead(nil, recAck, r.group, r.queue)
	b = le.AppendUint64(b, uint64(r.offset))
	return le.AppendUint32(b, r.gen)
}

func (r *changeRecord) encode() []byte {
	b := appendHead(nil, recChange, r.group, r.queue)
	b = le.AppendUint64(b, uint64(r.offset))
	b = le.AppendUint32(b, r.oldGen)
	b = le.AppendUint32(b, r.gen)
	return le.AppendUint64(b, uint64(r.deadline))
}

// reader reads fixed fields with a sticky error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: pop record truncated", model.ErrCorruptRecord)
		return make([]byte, max(n, 0))
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u32() uint32 { return le.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return le.Uint64(r.take(8)) }

// count reads a count of items of size bytes each, checking it fits.
func (r *reader) count(size int) int {
	n := int(r.u32())
	if r.err == nil && n*size > len(r.b) {
		r.err = fmt.Errorf("%w: pop record count %d", model.ErrCorruptRecord, n)
		return 0
	}
	return n
}

// decodeRecord parses a state record into one of the record types.
func decodeRecord(b []byte) (any, error) {
	r := &reader{b: b}
	typ := r.take(1)[0]
	group := string(r.take(int(le.Uint16(r.take(2)))))
	q := model.QueueID(r.u32())
	var out any
	switch typ {
	case recReceive, recReceiveFrom:
		rec := &receiveRecord{group: group, queue: q, base: -1}
		if typ == recReceiveFrom {
			rec.base = model.QueueOffset(r.u64())
		}
		rec.next = model.QueueOffset(r.u64())
		n := r.count(24)
		for i := 0; i < n && r.err == nil; i++ {
			rec.leases = append(rec.leases, leaseRecord{offset: model.QueueOffset(r.u64()), deadline: int64(r.u64()),
				attempts: int32(r.u32()), gen: r.u32()})
		}
		n = r.count(8)
		for i := 0; i < n && r.err == nil; i++ {
			rec.filtered = append(rec.filtered, model.QueueOffset(r.u64()))
		}
		out = rec
	case recAck:
		out = &ackRecord{group: group, queue: q, offset: model.QueueOffset(r.u64()), gen: r.u32()}
	case recReset:
		out = &resetRecord{group: group, queue: q, offset: model.QueueOffset(r.u64())}
	case recForget:
		out = &forgetRecord{group: group, queue: q}
	case recAcquire:
		out = decodeAcquire(r, group, q)
	case recSettle:
		out = decodeSettle(r, group, q)
	case recChange:
		out = &changeRecord{group: group, queue: q, offset: model.QueueOffset(r.u64()), oldGen: r.u32(), gen: r.u32(), deadline: int64(r.u64())}
	default:
		if r.err == nil {
			r.err = fmt.Errorf("%w: pop record type %d", model.ErrCorruptRecord, typ)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes in a pop record", model.ErrCorruptRecord, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// write appends a record and applies it (apply), both before a snapshot or
// checkpoint can look (the StateLog's apply-at-write mode). It neither asks
// for nor waits for an fsync: the record is in the log (it survives a
// process crash) and becomes durable with the next sync (another append's,
// or the flush interval's); what an operating-system crash can lose of it
// only makes a message come back sooner (at least once), never loses one.
func (e *Engine) write(ctx context.Context, payload []byte, apply func()) error {
	r := &storage.Record{Format: model.FormatInternal, Count: 1, Payload: payload}
	return e.slog.WriteApplied(ctx, 0, []*storage.Record{r}, storage.AppendOptions{Deferred: true}, apply)
}

// New opens the engine: it loads the state and starts the loops (Close
// stops them).
func New(ctx context.Context, b *broker.Broker, opts Options) (*Engine, error) {
	if opts.SnapshotInterval <= 0 {
		opts.SnapshotInterval = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t, err := b.EnsureInternalTopic(ctx, StateTopic, 1, broker.TopicConfig{})
	if err != nil {
		return nil, err
	}
	e := &Engine{b: b, opts: opts, log: opts.Logger.With("component", "pop"), states: map[key]*state{}, counts: map[string]*GroupStats{}}
	e.slog = b.NewStateLog(stateSection, t.Queues[:1], e)
	e.slog.ApplyAtWrite()
	if err := e.load(ctx); err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		e.run(bctx)
	}()
	go func() {
		defer e.wg.Done()
		e.slog.Run(bctx, opts.SnapshotInterval)
	}()
	return e, nil
}

// Close stops the loops.
func (e *Engine) Close() {
	e.cancel()
	e.wg.Wait()
}

// run commits each group's base as its offset every snapshot interval
// (after a restart, every base once again).
func (e *Engine) run(ctx context.Context) {
	t := time.NewTicker(e.opts.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.CommitBases(ctx)
		}
	}
}

// CommitBases commits each group's base (below it, every message is done)
// as the group's offset, so other protocols and admin tools see POP
// progress.
func (e *Engine) CommitBases(ctx context.Context) {
	type commit struct {
		k    key
		base model.QueueOffset
	}
	var commits []commit
	e.mu.Lock()
	for k, s := range e.states {
		s.mu.Lock()
		if s.loaded && s.base != s.baseSent {
			commits = append(commits, commit{k, s.base})
			s.baseSent = s.base
		}
		s.mu.Unlock()
	}
	e.mu.Unlock()
	for _, c := range commits {
		if ref, err := e.b.QueueByID(c.k.queue); err == nil {
			_ = e.b.CommitOffsetsNoWait(ctx, c.k.group, ref.Topic.Name, map[int32]broker.OffsetCommit{ref.Index: {Queue: c.k.queue, Offset: c.base, LeaderEpoch: -1}})
		}
	}
}

// Apply implements broker.StateMachine: one record read back.
func (e *Engine) Apply(_ int, at model.QueueOffset, payload []byte) {
	rec, err := decodeRecord(payload)
	if err != nil {
		e.log.Error("corrupt pop record skipped", "offset", at, "err", err)
		return
	}
	e.replay(rec)
}

// Entries implements broker.StateMachine: every (group, queue) state, by
// key: group len u16 | group | queue u32 | state.
func (e *Engine) Entries(int) [][]byte {
	e.mu.Lock()
	keys := make([]key, 0, len(e.states))
	for k, s := range e.states {
		if s.loaded {
			keys = append(keys, k)
		}
	}
	states := make([]*state, len(keys))
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].group < keys[j].group || keys[i].group == keys[j].group && keys[i].queue < keys[j].queue
	})
	for i, k := range keys {
		states[i] = e.states[k]
	}
	e.mu.Unlock()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		b := appendHead(nil, 0, k.group, k.queue)[1:]
		states[i].mu.Lock()
		out[i] = append(b, states[i].encode()...)
		states[i].mu.Unlock()
	}
	return out
}

// Restore implements broker.StateMachine.
func (e *Engine) Restore(_ int, entries [][]byte) error {
	states := make(map[key]*state, len(entries))
	for _, b := range entries {
		r := &reader{b: b}
		group := string(r.take(int(le.Uint16(r.take(2)))))
		q := model.QueueID(r.u32())
		if r.err != nil {
			return r.err
		}
		s, err := decodeState(r.b)
		if err != nil {
			return err
		}
		states[key{group, q}] = s
	}
	e.mu.Lock()
	e.states = states
	e.mu.Unlock()
	return nil
}

// Len implements broker.StateMachine.
func (e *Engine) Len(int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.states)
}

// encode is a state's snapshot: base, next, gen | leases | done.
func (s *state) encode() []byte {
	b := le.AppendUint64(nil, uint64(s.base))
	b = le.AppendUint64(b, uint64(s.next))
	b = le.AppendUint32(b, s.gen)
	b = le.AppendUint32(b, uint32(len(s.leases)))
	for off, l := range s.leases {
		b = le.AppendUint64(b, uint64(off))
		b = le.AppendUint64(b, uint64(l.deadline))
		b = le.AppendUint32(b, uint32(l.attempts))
		b = le.AppendUint32(b, l.gen)
	}
	b = le.AppendUint32(b, uint32(len(s.done)))
	for off := range s.done {
		b = le.AppendUint64(b, uint64(off))
	}
	// Share leases' holders, after what states written before share
	// groups held.
	held := 0
	for _, l := range s.leases {
		if l.holder != 0 {
			held++
		}
	}
	if held > 0 {
		b = le.AppendUint32(b, uint32(held))
		for off, l := range s.leases {
			if l.holder != 0 {
				b = le.AppendUint64(b, uint64(off))
				b = le.AppendUint64(b, l.holder)
			}
		}
	}
	return b
}

func decodeState(b []byte) (*state, error) {
	r := &reader{b: b}
	s := &state{loaded: true, base: model.QueueOffset(r.u64()), next: model.QueueOffset(r.u64()), gen: r.u32(),
		leases: map[model.QueueOffset]*lease{}, done: map[model.QueueOffset]bool{}}
	n := r.count(24)
	for i := 0; i < n && r.err == nil; i++ {
		off := model.QueueOffset(r.u64())
		s.leases[off] = &lease{deadline: int64(r.u64()), attempts: int32(r.u32()), gen: r.u32()}
	}
	n = r.count(8)
	for i := 0; i < n && r.err == nil; i++ {
		s.done[model.QueueOffset(r.u64())] = true
	}
	if r.err == nil && len(r.b) > 0 {
		n = r.count(16)
		for i := 0; i < n && r.err == nil; i++ {
			off, holder := model.QueueOffset(r.u64()), r.u64()
			if l := s.leases[off]; l != nil {
				l.holder = holder
			}
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: trailing bytes in a pop state", model.ErrCorruptRecord)
	}
	s.baseSent = -1 // not known to be committed: the first tick commits it
	return s, r.err
}

// load restores the state: from the checkpoint's section and the records
// after it, or from the queue alone; a snapshot older versions left in the
// metadata store is migrated into the queue.
func (e *Engine) load(ctx context.Context) error {
	migrated, err := e.loadLegacy(ctx)
	if err != nil {
		return err
	}
	if _, err := e.slog.Load(); err != nil {
		return err
	}
	if !migrated {
		return nil
	}
	return e.slog.FinishMigration(ctx, e.b.Meta(), legacyAppliedKey, legacySnapshotPrefix)
}

// loadLegacy reads the snapshot older versions kept in the metadata store
// and the records after it (false when there is none).
func (e *Engine) loadLegacy(ctx context.Context) (bool, error) {
	applied, kvs, found, err := broker.LegacySnapshot(ctx, e.b.Meta(), legacyAppliedKey, legacySnapshotPrefix)
	if !found || err != nil {
		return false, err
	}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, legacySnapshotPrefix)
		qs, group, ok := strings.Cut(rest, "/")
		q, qerr := strconv.ParseUint(qs, 10, 32)
		s, derr := decodeState(kv.Value)
		if !ok || qerr != nil || derr != nil {
			e.log.Error("corrupt pop state skipped", "key", kv.Key, "err", derr)
			continue
		}
		e.states[key{group, model.QueueID(q)}] = s
	}
	q := e.slog.Queues()[0]
	next := applied
	err = e.b.ScanRecords(q, applied, func(r *broker.StoredRecord) {
		e.Apply(0, r.BaseOffset, r.Payload)
		next = r.BaseOffset + model.QueueOffset(r.Count)
	})
	if err != nil {
		return false, err
	}
	e.slog.SkipTo(0, next)
	return true, nil
}

// replay applies one record read back.
func (e *Engine) replay(rec any) {
	var group string
	var q model.QueueID
	switch r := rec.(type) {
	case *receiveRecord:
		group, q = r.group, r.queue
	case *ackRecord:
		group, q = r.group, r.queue
	case *changeRecord:
		group, q = r.group, r.queue
	case *resetRecord:
		group, q = r.group, r.queue
	case *forgetRecord:
		group, q = r.group, r.queue
	case *acquireRecord:
		group, q = r.group, r.queue
	case *settleRecord:
		group, q = r.group, r.queue
	}
	base := model.QueueOffset(-1)
	switch r := rec.(type) {
	case *receiveRecord:
		base = r.base
	case *acquireRecord:
		base = r.base
	}
	s, err := e.stateFrom(group, q, base)
	if err != nil {
		return // the queue is gone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r := rec.(type) {
	case *receiveRecord:
		e.applyReceive(s, r)
	case *ackRecord:
		e.applyAck(s, r)
	case *changeRecord:
		e.applyChange(s, r)
	case *resetRecord:
		e.applyReset(s, r)
	case *forgetRecord:
		e.applyForget(s)
	case *acquireRecord:
		e.applyAcquire(s, r)
	case *settleRecord:
		e.applySettle(s, r)
	}
}
