package security

import (
	"sync"
	"time"
)

// Guard slows down and bounds would-be clients: failed authentications
// from one source are answered ever later (brute force costs time), and
// connections that have not yet authenticated are limited in number.
type Guard struct {
	mu        sync.Mutex
	failures  map[string]*failureRecord
	pending   int
	maxPend   int
	baseDelay time.Duration
	maxDelay  time.Duration
	now       func() time.Time
}

type failureRecord struct {
	count int
	last  time.Time
}

// NewGuard allows maxPending unauthenticated connections at once (0: no
// limit) and delays a failure reply by base, doubling per recent failure
// from the same source up to max.
func NewGuard(maxPending int, base, max time.Duration) *Guard {
	return &Guard{failures: map[string]*failureRecord{}, maxPend: maxPending, baseDelay: base, maxDelay: max, now: time.Now}
}

const failureWindow = time.Minute

// Failed records a failed authentication from a source and returns how
// long to wait before answering it.
func (g *Guard) Failed(source string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if len(g.failures) > 100_000 { // forget stale sources under a flood
		for k, r := range g.failures {
			if now.Sub(r.last) > failureWindow {
				delete(g.failures, k)
			}
		}
	}
	r := g.failures[source]
	if r == nil || now.Sub(r.last) > failureWindow {
		r = &failureRecord{}
		g.failures[source] = r
	}
	r.count++
	r.last = now
	d := g.baseDelay
	for i := 1; i < r.count && d < g.maxDelay; i++ {
		d *= 2
	}
	return min(d, g.maxDelay)
}

// Succeeded clears a source's failures.
func (g *Guard) Succeeded(source string) {
	g.mu.Lock()
	delete(g.failures, source)
	g.mu.Unlock()
}

// Admit counts one more unauthenticated connection; false when the limit
// is reached. Each admitted connection calls Done once, when it has
// authenticated or closed.
func (g *Guard) Admit() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maxPend > 0 && g.pending >= g.maxPend {
		return false
	}
	g.pending++
	return true
}

// Done releases what Admit counted.
func (g *Guard) Done() {
	g.mu.Lock()
	g.pending--
	g.mu.Unlock()
}
