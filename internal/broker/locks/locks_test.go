package locks

import (
	"testing"
	"time"
)

func TestLeases(t *testing.T) {
	now := time.Unix(0, 0)
	m := New(time.Minute, func() time.Time { return now })
	q := []Queue{{"t", 0}, {"t", 1}}
	if got := m.TryLock("g", "a", q); len(got) != 2 {
		t.Fatalf("a: %v", got)
	}
	if got := m.TryLock("g", "b", q); len(got) != 0 {
		t.Fatalf("b took a's locks: %v", got)
	}
	if got := m.TryLock("other", "b", q); len(got) != 2 {
		t.Fatal("locks are per group")
	}
	m.Unlock("g", "a", q[:1])
	if got := m.TryLock("g", "b", q); len(got) != 1 || got[0] != q[0] {
		t.Fatalf("b after a unlocked queue 0: %v", got)
	}
	now = now.Add(2 * time.Minute)
	if got := m.TryLock("g", "b", q); len(got) != 2 {
		t.Fatalf("expired lease not taken over: %v", got)
	}
	m.ReleaseClient("b")
	if got := m.TryLock("g", "c", q); len(got) != 2 {
		t.Fatalf("released client's locks: %v", got)
	}
}
