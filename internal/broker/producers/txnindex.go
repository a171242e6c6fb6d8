package producers

// TxnIndex is the per-queue view of Kafka transactions that readers need:
// which producers have a transaction open in a queue (from the offset of
// its first batch there: the last stable offset is the lowest of them) and
// which ranges belong to aborted transactions (Kafka's .txnindex, returned
// to read_committed fetches and used to hide aborted records from other
// protocols).
//
// It is derived from the log alone — transactional batches open a
// transaction, control batches (markers) close it — and is a
// storage.StateKeeper like the Manager: snapshot in every checkpoint,
// records after it replayed on open. Writers tell it about a batch before
// appending (with the queue's end offset then, a lower bound of the offset
// the batch will get), so the last stable offset never passes a
// transactional batch that is visible, and correct the offset afterwards.

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// AbortedTxn is one aborted transaction's range in a queue.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset model.QueueOffset
	LastOffset  model.QueueOffset // the abort marker's offset (a lower bound while it is being written)
}

type queueTxns struct {
	open    map[int64]model.QueueOffset // producer → first offset of its open transaction
	aborted []AbortedTxn                // by LastOffset
}

// TxnIndex tracks open and aborted transactions per queue.
type TxnIndex struct {
	mu     sync.RWMutex
	queues map[model.QueueID]*queueTxns
	// startOffset, when set, gives a queue's first offset, so snapshots drop
	// aborted ranges retention has removed.
	startOffset func(model.QueueID) (model.QueueOffset, bool)
}

var _ storage.StateKeeper = (*TxnIndex)(nil)

// NewTxnIndex returns an empty index.
func NewTxnIndex() *TxnIndex { return &TxnIndex{queues: map[model.QueueID]*queueTxns{}} }

// SetStartOffsets tells the index how to find queues' start offsets.
func (x *TxnIndex) SetStartOffsets(fn func(model.QueueID) (model.QueueOffset, bool)) {
	x.mu.Lock()
	x.startOffset = fn
	x.mu.Unlock()
}

func (x *TxnIndex) queue(q model.QueueID) *queueTxns {
	t := x.queues[q]
	if t == nil {
		t = &queueTxns{open: map[int64]model.QueueOffset{}}
		x.queues[q] = t
	}
	return t
}

// Begin records that producer pid writes a transactional batch to q at
// offset (or later); it reports whether this opened the transaction there.
func (x *TxnIndex) Begin(q model.QueueID, pid int64, offset model.QueueOffset) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.queue(q)
	if _, ok := t.open[pid]; ok {
		return false
	}
	t.open[pid] = offset
	return true
}

// Placed corrects an open transaction's first offset to where its first
// batch landed.
func (x *TxnIndex) Placed(q model.QueueID, pid int64, provisional, actual model.QueueOffset) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t := x.queues[q]; t != nil && t.open[pid] == provisional {
		t.open[pid] = actual
	}
}

// Unbegin drops a transaction Begin opened when its batch was not written.
func (x *TxnIndex) Unbegin(q model.QueueID, pid int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t := x.queues[q]; t != nil {
		delete(t.open, pid)
	}
}

// End closes producer pid's transaction in q with a marker at offset (or
// later); an aborted one's range is kept. A marker with no open
// transaction (a partition added but never written) changes nothing.
func (x *TxnIndex) End(q model.QueueID, pid int64, offset model.QueueOffset, commit bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.queues[q]
	if t == nil {
		return
	}
	first, ok := t.open[pid]
	if !ok {
		return
	}
	delete(t.open, pid)
	if !commit {
		a := AbortedTxn{ProducerID: pid, FirstOffset: first, LastOffset: offset}
		if slices.Contains(t.aborted, a) {
			return // replayed after a snapshot that has it
		}
		i := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].LastOffset >= offset })
		t.aborted = append(t.aborted, AbortedTxn{})
		copy(t.aborted[i+1:], t.aborted[i:])
		t.aborted[i] = a
	}
}

// LastStable returns the last stable offset of q given its high watermark:
// the first offset of its oldest open transaction, or hw.
func (x *TxnIndex) LastStable(q model.QueueID, hw model.QueueOffset) model.QueueOffset {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := x.queues[q]
	if t == nil {
		return hw
	}
	lso := hw
	for _, first := range t.open {
		lso = min(lso, first)
	}
	return lso
}

// OpenFirst returns the first offset of pid's open transaction in q.
func (x *TxnIndex) OpenFirst(q model.QueueID, pid int64) (model.QueueOffset, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := x.queues[q]
	if t == nil {
		return 0, false
	}
	off, ok := t.open[pid]
	return off, ok
}

// Open lists the producers with a transaction open in q.
func (x *TxnIndex) Open(q model.QueueID) map[int64]model.QueueOffset {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := map[int64]model.QueueOffset{}
	if t := x.queues[q]; t != nil {
		for pid, off := range t.open {
			out[pid] = off
		}
	}
	return out
}

// Aborted returns the aborted transactions of q that may hold records in
// [from, to): those ending at or after from and starting before to.
func (x *TxnIndex) Aborted(q model.QueueID, from, to model.QueueOffset) []AbortedTxn {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := x.queues[q]
	if t == nil {
		return nil
	}
	var out []AbortedTxn
	i := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].LastOffset >= from })
	for _, a := range t.aborted[i:] {
		if a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// IsAborted says whether the record of producer pid at offset in q belongs
// to an aborted transaction.
func (x *TxnIndex) IsAborted(q model.QueueID, pid int64, offset model.QueueOffset) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := x.queues[q]
	if t == nil {
		return false
	}
	i := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].LastOffset >= offset })
	for _, a := range t.aborted[i:] {
		if a.ProducerID == pid && a.FirstOffset <= offset {
			return true
		}
	}
	return false
}

// Name implements storage.StateKeeper.
func (x *TxnIndex) Name() string { return "kafka-txn-index" }

// Replay implements storage.StateKeeper: transactional batches open a
// transaction, markers close it.
func (x *TxnIndex) Replay(_ model.LogPos, r *storage.ReplayedRecord) {
	if r.Format != model.FormatKafkaBatchV2 || len(r.Payload) < kbatch.HeaderSize {
		return
	}
	h := kbatch.ReadHeader(r.Payload)
	if h.Attributes&kbatch.AttrTransactional == 0 || h.ProducerID < 0 {
		return
	}
	if h.Attributes&kbatch.AttrControl == 0 {
		x.Begin(r.Queue, h.ProducerID, r.BaseOffset)
		return
	}
	typ, err := kbatch.ControlType(r.Payload)
	if err != nil {
		return
	}
	x.End(r.Queue, h.ProducerID, r.BaseOffset, typ == kbatch.ControlCommit)
}

// The snapshot (little endian): version u8 (1) | queue count u32 |
// count × { queue u32 | open count u32 | open × { pid i64 | first i64 } |
// aborted count u32 | aborted × { pid i64 | first i64 | last i64 } }.
const txnSnapshotVersion = 1

// Capture implements storage.StateKeeper.
func (x *TxnIndex) Capture() ([]byte, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	le := binary.LittleEndian
	ids := make([]model.QueueID, 0, len(x.queues))
	for q, t := range x.queues {
		if x.startOffset != nil {
			if start, ok := x.startOffset(q); !ok {
				delete(x.queues, q) // queue deleted
				continue
			} else {
				i := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].LastOffset >= start })
				t.aborted = append(t.aborted[:0], t.aborted[i:]...)
			}
		}
		if len(t.open) == 0 && len(t.aborted) == 0 {
			delete(x.queues, q)
			continue
		}
		ids = append(ids, q)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	b := []byte{txnSnapshotVersion}
	b = le.AppendUint32(b, uint32(len(ids)))
	for _, q := range ids {
		t := x.queues[q]
		b = le.AppendUint32(b, uint32(q))
		b = le.AppendUint32(b, uint32(len(t.open)))
		for pid, first := range t.open {
			b = le.AppendUint64(b, uint64(pid))
			b = le.AppendUint64(b, uint64(first))
		}
		b = le.AppendUint32(b, uint32(len(t.aborted)))
		for _, a := range t.aborted {
			b = le.AppendUint64(b, uint64(a.ProducerID))
			b = le.AppendUint64(b, uint64(a.FirstOffset))
			b = le.AppendUint64(b, uint64(a.LastOffset))
		}
	}
	return b, nil
}

// Restore implements storage.StateKeeper.
func (x *TxnIndex) Restore(data []byte) error {
	qs := map[model.QueueID]*queueTxns{}
	if len(data) > 0 {
		var err error
		if qs, err = decodeTxnSnapshot(data); err != nil {
			return err
		}
	}
	x.mu.Lock()
	x.queues = qs
	x.mu.Unlock()
	return nil
}

func decodeTxnSnapshot(data []byte) (map[model.QueueID]*queueTxns, error) {
	le := binary.LittleEndian
	bad := func(what string) error {
		return fmt.Errorf("%w: transaction index snapshot: %s", model.ErrCorruptRecord, what)
	}
	if len(data) < 5 {
		return nil, bad("short header")
	}
	if data[0] != txnSnapshotVersion {
		return nil, fmt.Errorf("%w: transaction index snapshot version %d", model.ErrUnsupportedVersion, data[0])
	}
	b := data[5:]
	n := le.Uint32(data[1:])
	if int64(n)*12 > int64(len(b)) {
		return nil, bad("queue count")
	}
	u32 := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v := le.Uint32(b)
		b = b[4:]
		return v, true
	}
	out := make(map[model.QueueID]*queueTxns, n)
	for range n {
		q, ok1 := u32()
		no, ok2 := u32()
		if !ok1 || !ok2 || int64(no)*16 > int64(len(b)) {
			return nil, bad("open transactions")
		}
		t := &queueTxns{open: make(map[int64]model.QueueOffset, no)}
		for range no {
			t.open[int64(le.Uint64(b))] = model.QueueOffset(le.Uint64(b[8:]))
			b = b[16:]
		}
		na, ok := u32()
		if !ok || int64(na)*24 > int64(len(b)) {
			return nil, bad("aborted transactions")
		}
		t.aborted = make([]AbortedTxn, na)
		for i := range t.aborted {
			t.aborted[i] = AbortedTxn{ProducerID: int64(le.Uint64(b)), FirstOffset: model.QueueOffset(le.Uint64(b[8:])),
				LastOffset: model.QueueOffset(le.Uint64(b[16:]))}
			b = b[24:]
		}
		out[model.QueueID(q)] = t
	}
	if len(b) != 0 {
		return nil, bad("trailing bytes")
	}
	return out, nil
}

// Dump renders the index in a stable text form (replay-equivalence tests):
// per queue, the open transactions by producer and the aborted ranges.
func (x *TxnIndex) Dump() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	ids := make([]model.QueueID, 0, len(x.queues))
	for q := range x.queues {
		ids = append(ids, q)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var sb strings.Builder
	for _, q := range ids {
		t := x.queues[q]
		pids := make([]int64, 0, len(t.open))
		for pid := range t.open {
			pids = append(pids, pid)
		}
		sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
		for _, pid := range pids {
			fmt.Fprintf(&sb, "txn-open queue=%d pid=%d first=%d\n", q, pid, t.open[pid])
		}
		for _, a := range t.aborted {
			fmt.Fprintf(&sb, "txn-aborted queue=%d %+v\n", q, a)
		}
	}
	return sb.String()
}
