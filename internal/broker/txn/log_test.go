package txn

import "testing"

func TestStatusRoundTrip(t *testing.T) {
	st := Status{ID: "t", PID: 7, Epoch: 2, LastEpoch: 1, TimeoutMs: 60000, State: StateOngoing,
		Partitions: []Partition{{Index: 1, Queue: 9}}, Groups: []string{"g"},
		Offsets: []PendingOffset{{Partition: Partition{Index: 1, Queue: 9}, Group: "g", Offset: 5}}, StartMs: 1, UpdateMs: 2}
	got, err := decodeStatus(encodeStatus(&st))
	if err != nil || got.ID != "t" || got.State != StateOngoing || len(got.Offsets) != 1 || got.Offsets[0].Offset != 5 {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := decodeStatus([]byte(`{"id":"","state":1}`)); err == nil {
		t.Fatal("state without an id accepted")
	}
}

func FuzzDecodeStatus(f *testing.F) {
	f.Add(encodeStatus(&Status{ID: "t", PID: 1, State: StateCompleteCommit}))
	f.Add([]byte(`{"id":"x","state":99}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeStatus(b)
	})
}
