package broker

// RocketMQ transactional messages ("half" messages).
//
// Store. A half message is appended to the internal half queue with its
// destination in REAL_TOPIC / REAL_QID, so no consumer of any protocol sees
// it. Its resolution is an op record in the internal op queue (tag = the
// kind: c commit, r rollback, d discarded, k checked once; body = the half
// offset). A commit appends the real message and the op record in one
// append, real message first, so a recovered log never holds the op without
// the message (a crash between the two records of that one write may leave
// the message without the op: the half is then checked again and may be
// delivered twice — at least once, as in RocketMQ).
//
// Memory holds only the pending halves (group, store time, check schedule:
// about 100 bytes each) and a heap of their next check times. The cursor —
// the oldest pending half and the op-queue end at the time it was appended —
// is saved in the metadata store; every op about a half at or after the
// cursor lies after that op position, so a restart rebuilds the pending set
// by reading the op queue and the half queue from the cursor on. Both
// queues' start offsets follow the cursor, so resolved halves never pin the
// shared log.
//
// Check-back. A half still pending transactionTimeout after it was stored
// (or its CHECK_IMMUNITY_TIME_IN_SECONDS, when longer) is offered to the
// registered checkers (the front-ends), which ask a live producer of its
// group; every transactionCheckInterval it is asked again, and after
// transactionCheckMax checks it is moved to TRANS_CHECK_MAX_TIME_TOPIC and
// reported in the log. Each check is an op record, so the count survives a
// restart.

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Transactional message properties, as RocketMQ names them.
const (
	HeaderTransactionPrepared = "TRAN_MSG"
	HeaderProducerGroup       = "PGROUP"
	HeaderCheckImmunity       = "CHECK_IMMUNITY_TIME_IN_SECONDS"
	HeaderUniqKey             = "UNIQ_KEY"
	HeaderCheckTimes          = "TRANSACTION_CHECK_TIMES"
)

// RocketMQ sysFlag transaction bits.
const (
	flagTxnMask     = 0xC
	flagTxnPrepared = 0x4
	flagTxnCommit   = 0x8
)

// Errors of ending a transaction.
var (
	// ErrHalfNotPending: no pending half message at that place (unknown,
	// resolved already, or being resolved).
	ErrHalfNotPending = errors.New("no pending transactional message there")
	// ErrHalfGroupMismatch: the half message belongs to another producer group.
	ErrHalfGroupMismatch = errors.New("the producer group wrong")
)

var (
	halfTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "txn_half"}
	opTopic   = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "txn_op"}
	// DiscardTopic receives half messages checked the maximum number of
	// times without an answer (RocketMQ's name, so its tools find it).
	DiscardTopic = model.TopicName{Tenant: model.DefaultTenant, Namespace: model.DefaultNamespace, Topic: "TRANS_CHECK_MAX_TIME_TOPIC"}
)

// legacyHalfCursorKey is where older versions kept the half cursor.
const legacyHalfCursorKey = "txn/half-cursor"

// Op record kinds (their tags).
const (
	opTxnCommit   = "c"
	opTxnRollback = "r"
	opTxnDiscard  = "d"
	opTxnChecked  = "k"
)

// TxnCheck asks a producer group for the state of one half message.
type TxnCheck struct {
	Group     string
	Queue     model.QueueID // half queue
	Offset    model.QueueOffset
	StoreTime int64
	Checks    int           // checks before this one
	Message   model.Message // the half message, bytes owned by the check
}

// TxnChecker delivers a check to a live producer of the group (a front-end
// registers one); it reports whether a producer got it.
type TxnChecker func(TxnCheck) bool

// TxnStats counts transactional message events.
type TxnStats struct {
	Pending, Committed, RolledBack, Checks, Discarded int64
}

// halfEntry is one pending half message.
type halfEntry struct {
	group     string
	stored    int64 // ms
	firstWait int64 // ms before the first check
	checks    int
	nextCheck int64             // ms
	opEnd     model.QueueOffset // op queue end when the half was appended
	resolving bool
}

type halfCheck struct {
	at     int64
	offset model.QueueOffset
}

type halfCheckHeap []halfCheck

func (h halfCheckHeap) Len() int           { return len(h) }
func (h halfCheckHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h halfCheckHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *halfCheckHeap) Push(x any)        { *h = append(*h, x.(halfCheck)) }
func (h *halfCheckHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// halfStore is the broker's state of RocketMQ transactions.
type halfStore struct {
	half, op model.QueueID

	mu       sync.Mutex
	pending  map[model.QueueOffset]*halfEntry
	low      model.QueueOffset // no pending half below
	next     model.QueueOffset // half queue end as this store knows it
	checks   halfCheckHeap
	checkers []TxnChecker
	saved    string
	wake     chan struct{}

	committed, rolledBack, checked, discarded atomic.Int64
}

// startHalfStore opens the half and op queues, rebuilds the pending set and
// starts the check loop.
func (b *Broker) startHalfStore(ctx, bctx context.Context) error {
	var qs [2]model.QueueID
	for i, name := range []model.TopicName{halfTopic, opTopic} {
		t, err := b.EnsureInternalTopic(ctx, name, 1, TopicConfig{})
		if err != nil {
			return fmt.Errorf("transaction topic %s: %w", name.String(), err)
		}
		qs[i] = t.Queues[0]
	}
	h := &halfStore{half: qs[0], op: qs[1], pending: map[model.QueueOffset]*halfEntry{}, wake: make(chan struct{}, 1)}
	if err := b.recoverHalves(ctx, h); err != nil {
		return fmt.Errorf("recover transactions: %w", err)
	}
	b.halves = h
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.runHalfChecks(bctx)
	}()
	return nil
}

// recoverHalves rebuilds the pending halves from the cursor on: the start
// offsets of the half and op queues, which the cursor's saves move with log
// records (older versions also kept it in the metadata store, now ignored).
func (b *Broker) recoverHalves(ctx context.Context, h *halfStore) error {
	halfFrom, _, _, err := b.engine.Offsets(h.half)
	if err != nil {
		return err
	}
	opFrom, _, _, err := b.engine.Offsets(h.op)
	if err != nil {
		return err
	}
	h.saved = strconv.FormatInt(int64(halfFrom), 10) + ":" + strconv.FormatInt(int64(opFrom), 10)
	// Read first: a write on every new term would put an etcd proposal on
	// a failover's path, which a concurrent etcd leader change can hold
	// for etcd's request timeout (7 s).
	if _, err := b.meta.Get(ctx, legacyHalfCursorKey); err == nil {
		if err := meta.Delete(ctx, b.meta, legacyHalfCursorKey); err != nil {
			return err
		}
	} else if !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	type opState struct {
		resolved  bool
		checks    int
		lastCheck int64
	}
	ops := map[model.QueueOffset]*opState{}
	err = b.ScanQueue(h.op, opFrom, func(r *StoredRecord, m *model.Message) {
		off, err := strconv.ParseInt(string(m.Body), 10, 64)
		if err != nil {
			b.log.Error("corrupt transaction op record skipped", "offset", r.BaseOffset)
			return
		}
		st := ops[model.QueueOffset(off)]
		if st == nil {
			st = &opState{}
			ops[model.QueueOffset(off)] = st
		}
		if m.Tags == opTxnChecked {
			st.checks++
			st.lastCheck = r.StoreTime
		} else {
			st.resolved = true
		}
	})
	if err != nil {
		return err
	}
	now := b.opts.Now().UnixMilli()
	_, _, opEnd, err := b.engine.Offsets(h.op)
	if err != nil {
		return err
	}
	_, _, h.next, err = b.engine.Offsets(h.half)
	if err != nil {
		return err
	}
	h.low = h.next
	err = b.ScanQueue(h.half, halfFrom, func(r *StoredRecord, m *model.Message) {
		st := ops[r.BaseOffset]
		if st != nil && st.resolved {
			return
		}
		e := b.newHalfEntry(m, r.StoreTime)
		e.opEnd = min(opFrom, opEnd)
		if st != nil {
			e.checks = st.checks
			e.nextCheck = max(e.nextCheck, st.lastCheck+b.opts.TxnCheckInterval.Milliseconds())
		}
		h.pending[r.BaseOffset] = e
		h.low = min(h.low, r.BaseOffset)
		heap.Push(&h.checks, halfCheck{at: e.nextCheck, offset: r.BaseOffset})
	})
	if err != nil {
		return err
	}
	if len(h.pending) > 0 {
		b.log.Info("transactional messages pending after restart", "count", len(h.pending), "oldest_ms", now-h.oldestStore())
	}
	return nil
}

func (h *halfStore) oldestStore() int64 {
	if e := h.pending[h.low]; e != nil {
		return e.stored
	}
	return 0
}

// ScanRecords reads a queue from an offset to its end, record by record,
// for state rebuilt from the log.
func (b *Broker) ScanRecords(q model.QueueID, from model.QueueOffset, fn func(*StoredRecord)) error {
	start, _, end, err := b.engine.Offsets(q)
	if err != nil {
		return err
	}
	for off := max(from, start); off < end; {
		res, err := b.engine.Read(q, off, storage.ReadOptions{MaxBytes: 1 << 20})
		if err != nil {
			return err
		}
		if len(res.Records) == 0 {
			res.Release()
			break
		}
		for i := range res.Records {
			fn(&res.Records[i])
		}
		off = res.NextOffset
		res.Release()
	}
	return nil
}

// ScanQueue is ScanRecords decoding each message (corrupt ones are logged
// and skipped).
func (b *Broker) ScanQueue(q model.QueueID, from model.QueueOffset, fn func(*StoredRecord, *model.Message)) error {
	return b.ScanRecords(q, from, func(r *StoredRecord) {
		m, err := DecodeMessage(r.Payload)
		if err != nil {
			b.log.Error("corrupt record skipped", "queue", q, "offset", r.BaseOffset, "err", err)
			return
		}
		fn(r, &m)
	})
}

// newHalfEntry is the pending state of a half message stored at stored (ms).
func (b *Broker) newHalfEntry(m *model.Message, stored int64) *halfEntry {
	group, _ := m.Header(HeaderProducerGroup)
	wait := b.opts.TxnTimeout.Milliseconds()
	if v, ok := m.Header(HeaderCheckImmunity); ok {
		if s, err := strconv.ParseInt(string(v), 10, 64); err == nil && s*1000 > wait {
			wait = s * 1000
		}
	}
	return &halfEntry{group: string(group), stored: stored, firstWait: wait, nextCheck: stored + wait}
}

// AppendHalf stores a transactional half message bound for queue index of
// topic; it returns its offset in the half queue (HalfQueue), which names it
// when the transaction ends.
func (b *Broker) AppendHalf(ctx context.Context, topic model.TopicName, index int32, m model.Message) (model.QueueOffset, error) {
	if _, _, err := b.QueueID(topic, index); err != nil {
		return 0, err
	}
	h := b.halves
	m.Headers = append(withoutHeaders(m.Headers, HeaderRealTopic, HeaderRealQueue),
		model.Header{Key: HeaderRealTopic, Value: []byte(topic.String())},
		model.Header{Key: HeaderRealQueue, Value: []byte(strconv.Itoa(int(index)))})
	if _, ok := m.Header(HeaderTransactionPrepared); !ok {
		m.Headers = append(m.Headers, model.Header{Key: HeaderTransactionPrepared, Value: []byte("true")})
	}
	m.Flags = m.Flags&^flagTxnMask | flagTxnPrepared
	now := b.opts.Now().UnixMilli()
	r := &storage.Record{}
	messageRecord(r, &m, now)
	r.Queue = h.half
	_, _, opEnd, err := b.engine.Offsets(h.op)
	if err != nil {
		return 0, err
	}
	// Appended and registered under the lock: a cursor save never skips a
	// half that is written but not registered yet.
	h.mu.Lock()
	tk := b.engine.Ticket()
	if err := b.engine.AppendWith(ctx, []*storage.Record{r}, storage.AppendOptions{NoWait: true}); err != nil {
		h.mu.Unlock()
		return 0, err
	}
	e := b.newHalfEntry(&m, r.StoreTime)
	e.opEnd = opEnd
	h.pending[r.BaseOffset] = e
	h.next = r.BaseOffset + 1
	if len(h.pending) == 1 {
		h.low = r.BaseOffset
	}
	wasFirst := len(h.checks) == 0 || e.nextCheck < h.checks[0].at
	heap.Push(&h.checks, halfCheck{at: e.nextCheck, offset: r.BaseOffset})
	h.mu.Unlock()
	if wasFirst {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	if err := b.engine.WaitDurable(ctx, r.Pos+model.LogPos(r.Size), tk); err != nil {
		return 0, err
	}
	return r.BaseOffset, nil
}

// HalfQueue is the storage queue holding half messages.
func (b *Broker) HalfQueue() model.QueueID { return b.halves.half }

// EndTransaction commits or rolls back the half message at offset of the
// half queue for producer group. A commit appends the real message to its
// topic and returns its queue and offset.
func (b *Broker) EndTransaction(ctx context.Context, group string, offset model.QueueOffset, commit bool) (model.TopicName, int32, model.QueueOffset, error) {
	h := b.halves
	h.mu.Lock()
	e := h.pending[offset]
	switch {
	case e == nil || e.resolving:
		h.mu.Unlock()
		return model.TopicName{}, 0, 0, fmt.Errorf("%w: half offset %d", ErrHalfNotPending, offset)
	case e.group != group:
		h.mu.Unlock()
		return model.TopicName{}, 0, 0, fmt.Errorf("%w: half offset %d belongs to %q, not %q", ErrHalfGroupMismatch, offset, e.group, group)
	}
	e.resolving = true
	h.mu.Unlock()
	kind := opTxnRollback
	if commit {
		kind = opTxnCommit
	}
	topic, idx, off, err := b.resolveHalf(ctx, offset, kind)
	h.mu.Lock()
	if err != nil {
		e.resolving = false
	} else {
		h.forget(offset)
	}
	h.mu.Unlock()
	if err != nil {
		return model.TopicName{}, 0, 0, err
	}
	if commit {
		h.committed.Add(1)
	} else {
		h.rolledBack.Add(1)
	}
	return topic, idx, off, nil
}

// forget drops a resolved half; mu held.
func (h *halfStore) forget(offset model.QueueOffset) {
	delete(h.pending, offset)
	if offset == h.low {
		for h.low < h.next && h.pending[h.low] == nil {
			h.low++
		}
	}
}

// opRecord builds the op record of kind about a half offset.
func (b *Broker) opRecord(kind string, offset model.QueueOffset, now int64) *storage.Record {
	r := &storage.Record{}
	messageRecord(r, &model.Message{Tags: kind, Body: []byte(strconv.FormatInt(int64(offset), 10))}, now)
	r.Queue = b.halves.op
	return r
}

// resolveHalf writes a half's resolution: for a commit the real message and
// the op record in one append, for a discard the message to the discard
// topic and the op record, for a rollback only the op record.
func (b *Broker) resolveHalf(ctx context.Context, offset model.QueueOffset, kind string) (model.TopicName, int32, model.QueueOffset, error) {
	ended := b.opts.Now().UnixMilli() // (before consumers can see it)
	topic, idx, off, m, err := b.resolveHalfMessage(ctx, offset, kind)
	if err == nil && m != nil {
		if t, terr := b.Topic(topic); terr == nil && b.Traced(t, "") {
			ev := TraceEvent{Time: ended, Kind: TraceCommitted, Protocol: traceSource(ctx).Protocol, Client: traceSource(ctx).Client}
			if v, ok := m.Header(HeaderProducerGroup); ok {
				ev.Group = string(v)
			}
			switch kind {
			case opTxnRollback:
				ev.Kind, off = TraceRolledBack, -1
			case opTxnDiscard:
				ev.Kind, ev.Detail, off = TraceRolledBack, "discarded after its check-backs ran out", -1
			}
			b.TraceMessage(t, idx, off, m, ev)
		}
	}
	return topic, idx, off, err
}

// resolveHalfMessage ends a half message as kind says, returning where it
// went (committed) and the message when it was read.
func (b *Broker) resolveHalfMessage(ctx context.Context, offset model.QueueOffset, kind string) (model.TopicName, int32, model.QueueOffset, *model.Message, error) {
	now := b.opts.Now().UnixMilli()
	op := b.opRecord(kind, offset, now)
	if kind == opTxnRollback {
		if b.trace == nil {
			return model.TopicName{}, 0, 0, nil, b.engine.Append(ctx, []*storage.Record{op})
		}
		// Read it first, so a traced rollback names the message.
		m, merr := b.halfMessage(offset)
		if err := b.engine.Append(ctx, []*storage.Record{op}); err != nil || merr != nil {
			return model.TopicName{}, 0, 0, nil, err
		}
		realTopic, _ := m.Header(HeaderRealTopic)
		realQueue, _ := m.Header(HeaderRealQueue)
		topic, _ := model.ParseTopicName(string(realTopic))
		q, _ := strconv.Atoi(string(realQueue))
		return topic, int32(q), 0, &m, nil
	}
	m, err := b.halfMessage(offset)
	if err != nil {
		return model.TopicName{}, 0, 0, nil, err
	}
	realTopic, _ := m.Header(HeaderRealTopic)
	realQueue, _ := m.Header(HeaderRealQueue)
	topic, err := model.ParseTopicName(string(realTopic))
	if err != nil {
		return model.TopicName{}, 0, 0, nil, fmt.Errorf("%w: half message %d without a valid destination", model.ErrCorruptRecord, offset)
	}
	q, _ := strconv.Atoi(string(realQueue))
	idx := int32(q)
	if kind == opTxnDiscard {
		t, err := b.EnsureTopic(ctx, DiscardTopic)
		if errors.Is(err, model.ErrUnknownTopic) {
			t, err = b.CreateTopic(ctx, DiscardTopic, 1, TopicConfig{})
		}
		if err != nil {
			return model.TopicName{}, 0, 0, nil, err
		}
		topic, idx = t.Name, 0
	} else {
		m.Headers = withoutHeaders(m.Headers, HeaderRealTopic, HeaderRealQueue, HeaderTransactionPrepared, HeaderCheckTimes)
		m.Flags = m.Flags&^flagTxnMask | flagTxnCommit
	}
	restoreIndexKeys(&m)
	qid, t, err := b.QueueID(topic, idx)
	if errors.Is(err, model.ErrUnknownTopic) || errors.Is(err, model.ErrUnknownQueue) {
		b.log.Warn("transactional message for a deleted topic dropped", "topic", topic.String(), "queue", idx)
		return topic, idx, 0, nil, b.engine.Append(ctx, []*storage.Record{op})
	}
	if err != nil {
		return model.TopicName{}, 0, 0, nil, err
	}
	r := &storage.Record{}
	messageRecord(r, &m, now)
	r.Queue = qid
	if max := t.Config.MaxMessageBytes; max > 0 && len(r.Payload) > int(max) {
		return model.TopicName{}, 0, 0, nil, fmt.Errorf("%w: %d bytes, topic limit %d", model.ErrMessageTooLarge, len(r.Payload), max)
	}
	if err := b.engine.Append(ctx, []*storage.Record{r, op}); err != nil {
		return model.TopicName{}, 0, 0, nil, err
	}
	return topic, idx, r.BaseOffset, &m, nil
}

// halfMessage reads a half message back (a copy).
func (b *Broker) halfMessage(offset model.QueueOffset) (model.Message, error) {
	res, err := b.engine.Read(b.halves.half, offset, storage.ReadOptions{MaxRecords: 1})
	if err != nil {
		return model.Message{}, err
	}
	defer res.Release()
	if len(res.Records) == 0 || res.Records[0].BaseOffset != offset {
		return model.Message{}, fmt.Errorf("%w: no half message at %d", model.ErrCorruptRecord, offset)
	}
	m, err := DecodeMessage(append([]byte(nil), res.Records[0].Payload...))
	m.StoreTime = res.Records[0].StoreTime
	return m, err
}

// restoreIndexKeys gives a message read back from an internal queue the
// extra keys it was indexed by when sent (RocketMQ's space-separated KEYS
// and its UNIQ_KEY), which are not stored in the message.
func restoreIndexKeys(m *model.Message) {
	id, ok := m.Header(HeaderUniqKey)
	if !ok {
		return
	}
	m.IndexKeys = append(strings.Fields(string(m.Key)), string(id))
}

// AddTxnChecker registers a front-end's way of asking producers about
// pending transactions.
func (b *Broker) AddTxnChecker(fn TxnChecker) {
	h := b.halves
	h.mu.Lock()
	h.checkers = append(h.checkers, fn)
	h.mu.Unlock()
}

// TxnStats returns transactional message counters.
func (b *Broker) TxnStats() TxnStats {
	h := b.halves
	h.mu.Lock()
	n := len(h.pending)
	h.mu.Unlock()
	return TxnStats{Pending: int64(n), Committed: h.committed.Load(), RolledBack: h.rolledBack.Load(),
		Checks: h.checked.Load(), Discarded: h.discarded.Load()}
}

// PendingHalf is a RocketMQ transactional message waiting for its
// producer's commit or rollback.
type PendingHalf struct {
	Offset      model.QueueOffset // in the half queue: what EndTransaction takes
	Group       string            // producer group
	Topic       string            // destination, as clients name it
	MessageID   string            // UNIQ_KEY
	Keys        string
	StoredMs    int64
	Checks      int   // check-backs sent so far
	NextCheckMs int64 // when the next check-back goes out
}

// PendingHalves lists up to max pending half messages, oldest first.
func (b *Broker) PendingHalves(max int) []PendingHalf {
	h := b.halves
	h.mu.Lock()
	out := make([]PendingHalf, 0, min(len(h.pending), max))
	for off, e := range h.pending {
		if !e.resolving {
			out = append(out, PendingHalf{Offset: off, Group: e.group, StoredMs: e.stored, Checks: e.checks, NextCheckMs: e.nextCheck})
		}
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b PendingHalf) int { return cmp.Compare(a.Offset, b.Offset) })
	if len(out) > max {
		out = out[:max]
	}
	for i := range out {
		if m, err := b.halfMessage(out[i].Offset); err == nil {
			if v, ok := m.Header(HeaderRealTopic); ok {
				if n, err := model.ParseTopicName(string(v)); err == nil {
					out[i].Topic = n.Short()
				}
			}
			id, _ := m.Header(HeaderUniqKey)
			out[i].MessageID, out[i].Keys = string(id), string(m.Key)
		}
	}
	return out
}
