package storage

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

func FuzzDecodeEpochs(f *testing.F) {
	f.Add(encodeEpochs([]model.QueueID{1, 7}, [][]EpochStart{{{0, 0}, {3, 10}}, nil}))
	f.Add(encodeEpochs(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		lists, err := decodeEpochs(b)
		if err != nil {
			return
		}
		ids := make([]model.QueueID, 0, len(lists))
		ls := make([][]EpochStart, 0, len(lists))
		for id, l := range lists {
			ids, ls = append(ids, id), append(ls, l)
		}
		again, err := decodeEpochs(encodeEpochs(ids, ls))
		if err != nil || len(again) != len(lists) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

// TestLeaderEpochs checks the epoch cache across terms, restarts with and
// without a checkpoint (the record index continues across clean restarts, so
// a full replay keeps every record), and the epoch stamped into Kafka
// batches.
func TestLeaderEpochs(t *testing.T) {
	dir := t.TempDir()
	c := testConfig(dir)
	e := openEngine(t, c)
	ctx := context.Background()
	if err := e.CreateQueue(ctx, 1); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 0, 5)
	if ep := e.LeaderEpoch(); ep != 0 {
		t.Fatalf("term 1 epoch %d", ep)
	}
	e.Close()

	c.Term = 3
	e = openEngine(t, c)
	appendN(t, e, 1, 5, 3)
	batch := make([]byte, 61)
	binary.BigEndian.PutUint32(batch[12:], 0xffffffff) // a client's -1
	r := &Record{Queue: 1, Count: 1, Flags: commitlog.FlagPayloadOffset, Payload: batch}
	if err := e.Append(ctx, []*Record{r}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Read(1, 8, ReadOptions{MaxBytes: 1 << 20})
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("read: %v", err)
	}
	if got := int32(binary.BigEndian.Uint32(res.Records[0].Payload[12:])); got != 2 {
		t.Fatalf("stored batch epoch %d, want 2", got)
	}
	if got := int64(binary.BigEndian.Uint64(res.Records[0].Payload)); got != 8 {
		t.Fatalf("stored base offset %d", got)
	}
	res.Release()
	want := []EpochStart{{0, 0}, {2, 5}}
	check := func(when string) {
		t.Helper()
		got, err := e.Epochs(1)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: epochs %v (%v), want %v", when, got, err, want)
		}
		for _, tc := range []struct {
			req, ep model.Epoch
			end     model.QueueOffset
		}{{0, 0, 5}, {1, 0, 5}, {2, 2, 9}, {5, -1, -1}, {-1, -1, -1}} {
			ep, end, err := e.EndOffsetForEpoch(1, tc.req)
			if err != nil || ep != tc.ep || end != tc.end {
				t.Fatalf("%s: epoch %d ends at (%d, %d) %v, want (%d, %d)", when, tc.req, ep, end, err, tc.ep, tc.end)
			}
		}
		if ep, _ := e.EpochAt(1, 4); ep != 0 {
			t.Fatalf("%s: offset 4 in epoch %d", when, ep)
		}
		if ep, _ := e.EpochAt(1, 6); ep != 2 {
			t.Fatalf("%s: offset 6 in epoch %d", when, ep)
		}
	}
	check("live")
	e.Close()
	e = openEngine(t, c)
	check("from checkpoint")
	e.Close()
	if err := os.Remove(filepath.Join(dir, checkpointName)); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, c)
	check("replayed from the log")
	if err := e.SetStartOffset(1, 6); err != nil {
		t.Fatal(err)
	}
	want = []EpochStart{{2, 6}}
	got, _ := e.Epochs(1)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after retention: %v", got)
	}
	if ep, end, _ := e.EndOffsetForEpoch(1, 0); ep != 0 || end != 6 {
		t.Fatalf("epoch before the first: (%d, %d)", ep, end)
	}
	e.Close()
}

// TestStartOffsetsReplayFromLog: start moves are log records, so a replay
// without a checkpoint moves starts exactly as they moved (a start past the
// end when written stays clamped to that end).
func TestStartOffsetsReplayFromLog(t *testing.T) {
	dir := t.TempDir()
	c := testConfig(dir)
	e := openEngine(t, c)
	ctx := context.Background()
	if err := e.CreateQueues(ctx, []model.QueueID{1, 2}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 1, 0, 10)
	appendN(t, e, 2, 0, 3)
	if err := e.SetStartOffsets(ctx, map[model.QueueID]model.QueueOffset{1: 4, 2: 99}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, 2, 3, 5)                         // offsets 3..7; the start stays at 3
	if err := e.SetStartOffset(1, 2); err != nil { // backwards: no-op
		t.Fatal(err)
	}
	want := func(when string) {
		t.Helper()
		for q, start := range map[model.QueueID]model.QueueOffset{1: 4, 2: 3} {
			if got, _, _, _ := e.Offsets(q); got != start {
				t.Fatalf("%s: queue %d starts at %d, want %d", when, q, got, start)
			}
		}
	}
	want("live")
	e.Close()
	if err := os.Remove(filepath.Join(dir, checkpointName)); err != nil {
		t.Fatal(err)
	}
	e = openEngine(t, c)
	defer e.Close()
	want("replayed from the log")
}
