package member

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// fakeRoles is a replica whose role the test sets.
type fakeRoles struct {
	mu             sync.Mutex
	leader         model.NodeID
	term           model.Term
	writable, held bool
	err            error
	ch             chan struct{}
}

func newFakeRoles() *fakeRoles { return &fakeRoles{ch: make(chan struct{}, 1)} }

func (f *fakeRoles) set(fn func(*fakeRoles)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
}

func (f *fakeRoles) Leader() (model.NodeID, model.Term) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader, f.term
}

func (f *fakeRoles) Writable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writable
}

func (f *fakeRoles) Leads() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writable || f.held
}

func (f *fakeRoles) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeRoles) RoleChanged() <-chan struct{} { return f.ch }

// fakeClock fires the timers the loop asks for only when the test says.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers chan chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1000, 0), timers: make(chan chan time.Time, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.timers <- ch
	return ch
}

// serving records a term's end.
type serving struct {
	term  model.Term
	ended chan model.Term
}

func (s *serving) End() { s.ended <- s.term }

// TestTermLoopFollowsRoles: a term starts when the replica leads with
// appends open, goes on while appends are held, ends when leadership ends
// or a later term begins (and the later one starts at once), a failed
// start is retried only when its timer fires, and a failed replica ends
// the loop with its error.
func TestTermLoopFollowsRoles(t *testing.T) {
	roles, clock := newFakeRoles(), newFakeClock()
	started, ended := make(chan model.Term, 8), make(chan model.Term, 8)
	var failStart sync.Mutex
	fail := false
	l := &termLoop{group: 1, raft: roles, clock: clock, log: slog.New(slog.DiscardHandler),
		start: func(context.Context) (Serving, error) {
			failStart.Lock()
			defer failStart.Unlock()
			if fail {
				return nil, errors.New("no broker today")
			}
			_, tm := roles.Leader()
			started <- tm
			return &serving{term: tm, ended: ended}, nil
		},
		end: func(s Serving) { s.End() },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.run(ctx) }()
	expect := func(ch chan model.Term, want model.Term, what string) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("%s term %d, want %d", what, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s of term %d", what, want)
		}
	}
	none := func(ch chan model.Term, what string) {
		t.Helper()
		select {
		case got := <-ch:
			t.Fatalf("unexpected %s of term %d", what, got)
		default:
		}
	}

	roles.set(func(f *fakeRoles) { f.leader, f.term, f.writable = 1, 2, true })
	expect(started, 2, "start")
	// A hand-off under way holds appends: the term goes on.
	roles.set(func(f *fakeRoles) { f.writable, f.held = false, true })
	roles.set(func(f *fakeRoles) { f.writable, f.held = true, false })
	// A later term of this member: the old one ends, the new one starts.
	roles.set(func(f *fakeRoles) { f.term = 3 })
	expect(ended, 2, "end")
	expect(started, 3, "start")
	none(ended, "end")
	// Leadership moves away.
	roles.set(func(f *fakeRoles) { f.leader, f.term, f.writable = 2, 4, false })
	expect(ended, 3, "end")

	// A start that fails waits for its retry timer.
	failStart.Lock()
	fail = true
	failStart.Unlock()
	roles.set(func(f *fakeRoles) { f.leader, f.term, f.writable = 1, 5, true })
	retry := <-clock.timers
	roles.set(func(*fakeRoles) {}) // a wake-up before the timer: no new start
	failStart.Lock()
	fail = false
	failStart.Unlock()
	none(started, "start")
	retry <- clock.Now()
	expect(started, 5, "start")

	// The replica fails: the term ends and the loop returns the error.
	stop := errors.New("disk gone")
	roles.set(func(f *fakeRoles) { f.writable, f.err = false, stop })
	expect(ended, 5, "end")
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("the loop ended with %v", err)
	}
}

// TestTermLoopEndsWithItsContext: the member stopping ends the term.
func TestTermLoopEndsWithItsContext(t *testing.T) {
	roles := newFakeRoles()
	ended := make(chan model.Term, 1)
	started := make(chan struct{})
	l := &termLoop{group: 0, raft: roles, clock: newFakeClock(), log: slog.New(slog.DiscardHandler),
		start: func(context.Context) (Serving, error) { close(started); return &serving{term: 7, ended: ended}, nil },
		end:   func(s Serving) { s.End() },
	}
	roles.set(func(f *fakeRoles) { f.leader, f.term, f.writable = 1, 7, true })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-ended; got != 7 {
		t.Fatalf("ended term %d", got)
	}
}
