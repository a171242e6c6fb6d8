package admin

import (
	"testing"
	"time"
)

// TestHistoryRates: rates over the last minute from the samples kept, and
// a group behind that stopped committing is stuck only once two minutes of
// samples say so.
func TestHistoryRates(t *testing.T) {
	h := &History{interval: 10 * time.Second, keep: 31}
	t0 := time.Unix(1_000_000, 0)
	add := func(sec int, ends, committed, lag int64) {
		h.samples = append(h.samples, historySample{at: t0.Add(time.Duration(sec) * time.Second),
			topics: map[string]int64{"t": ends}, committed: map[string]int64{"g": committed}, lag: map[string]int64{"g": lag}})
	}
	if r := h.TopicRate("t"); r != 0 {
		t.Fatalf("rate with no samples: %v", r)
	}
	add(0, 0, 0, 0)
	if r := h.TopicRate("t"); r != 0 {
		t.Fatalf("rate with one sample: %v", r)
	}
	for s := 10; s <= 120; s += 10 {
		add(s, int64(s)*100, min(int64(s), 60)*50, int64(s)*100-min(int64(s), 60)*50)
	}
	if r := h.TopicRate("t"); r != 100 {
		t.Fatalf("topic rate %v, want 100/s", r)
	}
	if r, stuck := h.GroupRate("g"); r != 0 || stuck {
		t.Fatalf("group rate %v stuck %v after one minute without commits, want 0 and not yet stuck", r, stuck)
	}
	for s := 130; s <= 200; s += 10 {
		add(s, int64(s)*100, 3000, int64(s)*100-3000)
	}
	if _, stuck := h.GroupRate("g"); !stuck {
		t.Fatal("a group behind for over two minutes without commits is not stuck")
	}
	if pts := h.LagHistory("g"); len(pts) != len(h.samples) || pts[len(pts)-1].Lag != 17000 {
		t.Fatalf("lag history %v", pts)
	}
	if r, _ := h.GroupRate("nobody"); r != 0 {
		t.Fatalf("rate of an unknown group %v", r)
	}
}
