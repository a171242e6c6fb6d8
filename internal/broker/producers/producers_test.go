package producers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

func newTestManager(t *testing.T, opts Options) *Manager {
	t.Helper()
	store, err := meta.OpenBolt(t.TempDir() + "/meta.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return New(store, opts)
}

// batchRecord is a replayed Kafka batch of producer pid.
func batchRecord(queue model.QueueID, pid int64, epoch int16, first, last int32, base model.QueueOffset, storeTime int64) *storage.ReplayedRecord {
	p := make([]byte, kbatch.HeaderSize)
	be := binary.BigEndian
	be.PutUint64(p[43:], uint64(pid))
	be.PutUint16(p[51:], uint16(epoch))
	be.PutUint32(p[53:], uint32(first))
	be.PutUint32(p[23:], uint32(last-first))
	r := &storage.ReplayedRecord{Payload: p}
	r.Format = model.FormatKafkaBatchV2
	r.Queue = queue
	r.BaseOffset = base
	r.StoreTime = storeTime
	return r
}

func TestSnapshotReplayRestore(t *testing.T) {
	now := time.Now()
	m := newTestManager(t, Options{Now: func() time.Time { return now }})
	for i := int32(0); i < 8; i++ {
		m.Replay(0, batchRecord(1, 7, 0, i*10, i*10+9, model.QueueOffset(i*10), now.UnixMilli()))
	}
	m.Replay(0, batchRecord(2, 7, 3, 0, 4, 100, now.UnixMilli()))
	snap, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	// Replaying batches the snapshot already reflects changes nothing.
	m2 := newTestManager(t, Options{Now: func() time.Time { return now }})
	if err := m2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	for i := int32(4); i < 8; i++ {
		m2.Replay(0, batchRecord(1, 7, 0, i*10, i*10+9, model.QueueOffset(i*10), now.UnixMilli()))
	}
	snap2, _ := m2.Capture()
	if !bytes.Equal(snapSorted(t, snap), snapSorted(t, snap2)) {
		t.Fatal("replaying reflected batches changed the state")
	}
	st := m2.Acquire(1, 7)
	off, dup, err := st.Check(0, 70, 79)
	st.Unlock()
	if err != nil || !dup || off != 70 {
		t.Fatalf("retry of the newest batch: %d %v %v", off, dup, err)
	}
	st = m2.Acquire(1, 7)
	_, dup, err = st.Check(0, 80, 85)
	st.Unlock()
	if err != nil || dup {
		t.Fatalf("next batch: %v %v", dup, err)
	}
	st = m2.Acquire(1, 7)
	_, _, err = st.Check(0, 90, 95)
	st.Unlock()
	if !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	st = m2.Acquire(2, 7)
	_, _, err = st.Check(2, 5, 6)
	st.Unlock()
	if !errors.Is(err, ErrInvalidEpoch) {
		t.Fatalf("old epoch: %v", err)
	}
}

// snapSorted decodes a snapshot and re-encodes it in key order, since map
// order makes the bytes differ.
func snapSorted(t *testing.T, b []byte) []byte {
	t.Helper()
	states, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{states: states}
	out, _ := m.captureSorted()
	return out
}

func TestExpirationAndBound(t *testing.T) {
	now := time.Now()
	m := newTestManager(t, Options{Expiration: time.Hour, MaxStates: 100, Now: func() time.Time { return now }})
	m.Replay(0, batchRecord(1, 1, 0, 0, 0, 0, now.Add(-2*time.Hour).UnixMilli()))
	m.Replay(0, batchRecord(1, 2, 0, 0, 0, 1, now.UnixMilli()))
	if _, err := m.Capture(); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 1 {
		t.Fatalf("%d states after expiry, want 1", m.Len())
	}
	for pid := int64(10); pid < 300; pid++ {
		m.Replay(0, batchRecord(1, pid, 0, 0, 0, model.QueueOffset(pid), now.UnixMilli()+pid))
	}
	if n := m.Len(); n > 100 {
		t.Fatalf("%d states held, bound 100", n)
	}
	// The most recent producer is still known.
	st := m.Acquire(1, 299)
	_, dup, _ := st.Check(0, 0, 0)
	st.Unlock()
	if !dup {
		t.Fatal("most recent producer forgotten")
	}
}

// FuzzDecodeSnapshot: arbitrary snapshot bytes never panic and a decoded
// snapshot re-encodes to the same states.
func FuzzDecodeSnapshot(f *testing.F) {
	m := &Manager{states: map[key]*State{}}
	st := &State{epoch: 1, lastUsed: 5, batches: []Batch{{1, 0, 4, 10}, {1, 5, 9, 15}}}
	m.states[key{3, 9}] = st
	seed, _ := m.captureSorted()
	f.Add(seed)
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		states, err := decodeSnapshot(b)
		if err != nil {
			return
		}
		out, _ := (&Manager{states: states}).captureSorted()
		again, err := decodeSnapshot(out)
		if err != nil {
			t.Fatalf("re-encoded snapshot: %v", err)
		}
		if out2, _ := (&Manager{states: again}).captureSorted(); !bytes.Equal(out, out2) {
			t.Fatal("encoding is not stable")
		}
	})
}

func TestTxnIndex(t *testing.T) {
	x := NewTxnIndex()
	x.Begin(1, 7, 10)
	x.Placed(1, 7, 10, 12)
	x.Begin(1, 8, 15)
	if lso := x.LastStable(1, 20); lso != 12 {
		t.Fatalf("lso %d", lso)
	}
	x.End(1, 7, 18, false)
	x.End(1, 8, 19, true)
	if lso := x.LastStable(1, 20); lso != 20 {
		t.Fatalf("lso after end %d", lso)
	}
	if !x.IsAborted(1, 7, 13) || x.IsAborted(1, 8, 16) || x.IsAborted(1, 7, 19) {
		t.Fatal("aborted ranges")
	}
	if got := x.Aborted(1, 0, 13); len(got) != 1 || got[0].FirstOffset != 12 {
		t.Fatalf("aborted %+v", got)
	}
	if got := x.Aborted(1, 19, 30); len(got) != 0 {
		t.Fatalf("aborted past the range %+v", got)
	}
	x.Begin(2, 9, 3)
	snap, err := x.Capture()
	if err != nil {
		t.Fatal(err)
	}
	y := NewTxnIndex()
	if err := y.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if y.LastStable(2, 10) != 3 || !y.IsAborted(1, 7, 13) {
		t.Fatal("restored index differs")
	}
}

func FuzzDecodeTxnSnapshot(f *testing.F) {
	x := NewTxnIndex()
	x.Begin(1, 7, 10)
	x.End(1, 7, 12, false)
	x.Begin(1, 8, 13)
	snap, _ := x.Capture()
	f.Add(snap)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeTxnSnapshot(b)
	})
}

// TestExpirationFollowsLogTime: expiry is measured in the store times of
// the batches, not the wall clock, so replaying the same records gives the
// same states whenever it happens.
func TestExpirationFollowsLogTime(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	farFuture := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var captures [2][]byte
	for i := range captures {
		m := newTestManager(t, Options{Expiration: time.Hour, Now: func() time.Time { return farFuture }})
		m.Replay(0, batchRecord(1, 1, 0, 0, 0, 0, base))
		m.Replay(0, batchRecord(1, 2, 0, 0, 0, 1, base+30*time.Minute.Milliseconds()))
		st := m.Acquire(1, 1)
		if _, dup, _ := st.Check(0, 0, 0); !dup {
			t.Fatal("a producer idle for less than the expiration in log time was forgotten")
		}
		st.Unlock()
		m.Replay(0, batchRecord(1, 2, 0, 1, 1, 2, base+2*time.Hour.Milliseconds()))
		st = m.Acquire(1, 1)
		if _, dup, _ := st.Check(0, 0, 0); dup {
			t.Fatal("a producer idle past the expiration in log time was kept")
		}
		st.Unlock()
		var err error
		if captures[i], err = m.Capture(); err != nil {
			t.Fatal(err)
		}
	}
	if string(captures[0]) != string(captures[1]) {
		t.Fatal("the same records gave different states")
	}
}
