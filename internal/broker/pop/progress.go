package pop

// What the engine holds, for people: per (group, queue) progress for the
// admin API, and a stable dump for replay-equivalence tests.

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/rosettamq/rosetta/internal/model"
)

// Dump renders every (group, queue) state in a stable text form
// (replay-equivalence tests).
func (e *Engine) Dump() string {
	var sb strings.Builder
	for _, b := range e.Entries(0) {
		r := &reader{b: b}
		group := string(r.take(int(le.Uint16(r.take(2)))))
		q := model.QueueID(r.u32())
		s, err := decodeState(r.b)
		if err != nil {
			fmt.Fprintf(&sb, "pop %s/%d: %v\n", group, q, err)
			continue
		}
		leases := make([]string, 0, len(s.leases))
		for off, l := range s.leases {
			leases = append(leases, fmt.Sprintf("%d:%+v", off, *l))
		}
		done := make([]string, 0, len(s.done))
		for off := range s.done {
			done = append(done, fmt.Sprint(off))
		}
		sort.Strings(leases)
		sort.Strings(done)
		fmt.Fprintf(&sb, "pop %s/%d base=%d next=%d gen=%d leases=%v done=%v\n", group, q, s.base, s.next, s.gen, leases, done)
	}
	return sb.String()
}

// QueueProgress is a group's POP position in one queue: every offset below
// Base is done, Next is the first never handed out, InFlight counts the
// messages handed out and not done; Leases lists the lowest of them.
type QueueProgress struct {
	Queue    model.QueueID
	Base     model.QueueOffset
	Next     model.QueueOffset
	InFlight int
	Leases   []LeaseView
}

// LeaseView is one message handed out and not done.
type LeaseView struct {
	Offset     model.QueueOffset
	DeadlineMs int64 // invisible until then
	Attempts   int32
}

// Progress returns group's position in every queue it received from,
// listing at most maxLeases leases per queue (lowest offsets first).
func (e *Engine) Progress(group string, maxLeases int) []QueueProgress {
	e.mu.Lock()
	var qs []model.QueueID
	var ss []*state
	for k, s := range e.states {
		if k.group == group {
			qs, ss = append(qs, k.queue), append(ss, s)
		}
	}
	e.mu.Unlock()
	out := make([]QueueProgress, 0, len(ss))
	for i, s := range ss {
		s.mu.Lock()
		if !s.loaded {
			s.mu.Unlock()
			continue
		}
		p := QueueProgress{Queue: qs[i], Base: s.base, Next: s.next, InFlight: len(s.leases)}
		offs := slices.Sorted(maps.Keys(s.leases))
		for _, off := range offs[:min(len(offs), maxLeases)] {
			l := s.leases[off]
			p.Leases = append(p.Leases, LeaseView{Offset: off, DeadlineMs: l.deadline, Attempts: l.attempts})
		}
		s.mu.Unlock()
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b QueueProgress) int { return cmp.Compare(a.Queue, b.Queue) })
	return out
}
