package mqtt

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestStateSnapshot: the state's entries rebuild the same state.
func TestStateSnapshot(t *testing.T) {
	st := newState()
	for _, r := range []stateRecord{
		{Kind: "session", Client: "a", Expiry: 60, Connected: true, Subs: []storedSub{{Filter: "x/#", QoS: 2, ID: 4}}},
		{Kind: "pos", Client: "a", Positions: map[string]int64{"7": 10, "8": 3}},
		{Kind: "in2", Client: "a", PacketID: 5, Set: true},
		{Kind: "in2", Client: "a", PacketID: 6, Set: true},
		{Kind: "in2", Client: "a", PacketID: 6},
		{Kind: "out2", Client: "a", PacketID: 9, Out: &storedOut{Queue: 7, Offset: 11}},
		{Kind: "out2", Client: "a", PacketID: 9, Out: &storedOut{Queue: 7, Offset: 12, Done: true}},
		{Kind: "retain", Retained: &storedRetained{Topic: "x/y", Payload: []byte("v"), QoS: 1, User: [][2]string{{"k", "v"}}}},
		{Kind: "retain", Retained: &storedRetained{Topic: "x/z", Payload: []byte("w")}},
		{Kind: "retain", Retained: &storedRetained{Topic: "x/z"}},
		{Kind: "session", Client: "b", Expiry: 10},
		{Kind: "drop", Client: "b"},
	} {
		b, _ := json.Marshal(&r)
		st.Apply(0, 0, b)
	}
	again := newState()
	if err := again.Restore(0, st.Entries(0)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.sessions, again.sessions) || !reflect.DeepEqual(st.retained, again.retained) {
		t.Fatalf("restored %+v %+v, want %+v %+v", again.sessions["a"], again.retained, st.sessions["a"], st.retained)
	}
	if im := again.sessions["a"]; len(im.inbound) != 1 || !im.inbound[5] || len(im.outbound) != 2 || len(again.retained) != 1 || again.sessions["b"] != nil {
		t.Fatalf("state %+v retained %v", im, again.retained)
	}
}

// FuzzStateApply: no record read back from the log makes applying it or
// restoring from it panic.
func FuzzStateApply(f *testing.F) {
	for _, r := range []stateRecord{{Kind: "out2", Client: "a", PacketID: 1, Out: &storedOut{Queue: 1, Offset: 2}},
		{Kind: "image", Client: "a", Session: &storedSessionImage{Expiry: 5, Positions: map[string]int64{"1": 2}}, Inbound: []uint16{3},
			Outbound: map[string]storedOut{"1/2": {ID: 4, Queue: 1, Offset: 2}}}} {
		b, _ := json.Marshal(&r)
		f.Add(b)
	}
	f.Add([]byte(`{"k":"out2"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st := newState()
		st.Apply(0, 0, b)
		_ = st.Restore(0, [][]byte{b})
		_ = st.Entries(0)
	})
}
