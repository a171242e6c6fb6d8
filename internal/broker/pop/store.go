package pop

// The engine's durable state: records in the internal queue
// system/internal/pop, snapshots in the metadata store.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// StateTopic is the internal topic of POP state records.
var StateTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "pop"}

const (
	recReceive = 1
	recAck     = 2
	recChange  = 3

	snapshotPrefix = "pop/states/"
	appliedKey     = "pop/applied"
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

var le = binary.LittleEndian

func appendHead(b []byte, typ byte, group string, q model.QueueID) []byte {
	b = append(b, typ)
	b = le.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	return le.AppendUint32(b, uint32(q))
}

func (r *receiveRecord) encode() []byte {
	b := appendHead(nil, recReceive, r.group, r.queue)
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
	case recReceive:
		rec := &receiveRecord{group: group, queue: q, next: model.QueueOffset(r.u64())}
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

// store appends state records.
type store struct {
	engine *storage.Engine
	queue  model.QueueID

	changeMu sync.RWMutex // shared from append to apply, exclusive for a snapshot
}

// write appends a record and applies it, both under the shared lock (a
// snapshot never misses an applied record below its position). It neither
// asks for nor waits for an fsync: the record is in the log (it survives a
// process crash) and becomes durable with the next sync (another append's,
// or the flush interval's); what an
// operating-system crash can lose of it only makes a message come back
// sooner (at least once), never loses one.
func (st *store) write(ctx context.Context, payload []byte, apply func()) error {
	st.changeMu.RLock()
	defer st.changeMu.RUnlock()
	r := &storage.Record{Queue: st.queue, Format: model.FormatInternal, Count: 1, Payload: payload}
	if err := st.engine.AppendWith(ctx, []*storage.Record{r}, storage.AppendOptions{Deferred: true}); err != nil {
		return err
	}
	apply()
	return nil
}

// New opens the engine: it loads the snapshot, replays the records after
// it and starts the snapshot loop (Close stops it).
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
	e := &Engine{b: b, opts: opts, log: opts.Logger.With("component", "pop"), states: map[key]*state{}, counts: map[string]*GroupStats{},
		st: &store{engine: b.Engine(), queue: t.Queues[0]}}
	if err := e.load(ctx); err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.run(bctx)
	}()
	return e, nil
}

// Close stops the snapshot loop after a last snapshot.
func (e *Engine) Close() {
	e.cancel()
	e.wg.Wait()
}

// run snapshots the state until ctx ends, and once more then.
func (e *Engine) run(ctx context.Context) {
	t := time.NewTicker(e.opts.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := e.Snapshot(context.Background()); err != nil {
				e.log.Warn("pop state snapshot failed", "err", err)
			}
			return
		case <-t.C:
			if err := e.Snapshot(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("pop state snapshot failed", "err", err)
			}
		}
	}
}

func stateKey(k key) string {
	return snapshotPrefix + strconv.FormatUint(uint64(k.queue), 10) + "/" + k.group
}

// Snapshot saves every state, commits each group's base as its offset and
// lets the record queue drop what lies before.
func (e *Engine) Snapshot(ctx context.Context) error {
	e.st.changeMu.Lock()
	_, hw, _, err := e.st.engine.Offsets(e.st.queue)
	if err != nil {
		e.st.changeMu.Unlock()
		return err
	}
	e.mu.Lock()
	ops := make([]meta.Op, 0, len(e.states)+1)
	type commit struct {
		k    key
		base model.QueueOffset
	}
	var commits []commit
	for k, s := range e.states {
		s.mu.Lock()
		if s.loaded {
			ops = append(ops, meta.Op{Key: stateKey(k), Value: s.encode()})
			if s.base != s.baseSent {
				commits = append(commits, commit{k, s.base})
				s.baseSent = s.base
			}
		}
		s.mu.Unlock()
	}
	e.mu.Unlock()
	e.st.changeMu.Unlock()
	for _, c := range commits {
		if ref, err := e.b.QueueByID(c.k.queue); err == nil {
			_ = e.b.CommitOffsetsNoWait(ctx, c.k.group, ref.Topic.Name, map[int32]broker.OffsetCommit{ref.Index: {Queue: c.k.queue, Offset: c.base, LeaderEpoch: -1}})
		}
	}
	ops = append(ops, meta.Op{Key: appliedKey, Value: []byte(strconv.FormatInt(int64(hw), 10))})
	if _, err := e.b.Meta().Txn(ctx, nil, ops); err != nil {
		return err
	}
	return e.st.engine.SetStartOffset(e.st.queue, hw)
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
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: trailing bytes in a pop state", model.ErrCorruptRecord)
	}
	s.baseSent = s.base
	return s, r.err
}

// load restores the snapshot and replays the records after it.
func (e *Engine) load(ctx context.Context) error {
	var applied model.QueueOffset
	if kv, err := e.b.Meta().Get(ctx, appliedKey); err == nil {
		n, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("pop snapshot position: %w", err)
		}
		applied = model.QueueOffset(n)
	} else if !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	kvs, err := e.b.Meta().List(ctx, snapshotPrefix)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, snapshotPrefix)
		qs, group, ok := strings.Cut(rest, "/")
		q, qerr := strconv.ParseUint(qs, 10, 32)
		s, derr := decodeState(kv.Value)
		if !ok || qerr != nil || derr != nil {
			e.log.Error("corrupt pop state skipped", "key", kv.Key, "err", derr)
			continue
		}
		e.states[key{group, model.QueueID(q)}] = s
	}
	return e.b.ScanRecords(e.st.queue, applied, func(r *broker.StoredRecord) {
		rec, err := decodeRecord(r.Payload)
		if err != nil {
			e.log.Error("corrupt pop record skipped", "offset", r.BaseOffset, "err", err)
			return
		}
		e.replay(rec)
	})
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
	}
	s, err := e.state(group, q)
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
	}
}
