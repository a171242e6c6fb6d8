package member

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Server serves clients for the groups this member leads; the composition
// root implements it (it builds the group's broker and front-ends).
type Server interface {
	// Serve starts serving group g over its replica r: everything r's
	// engine holds is committed, and its state machines are to be built
	// from the log alone. ctx ends with the member.
	Serve(ctx context.Context, g *Group, r *Replica) (Serving, error)
	// Grow is told of groups added to the cluster while the member runs,
	// before any of them is served.
	Grow(groups []*Group)
}

// Serving is one period of serving a group's clients.
type Serving interface {
	// End stops serving: new connections relay again, the period's
	// connections close and its broker stops.
	End()
}

// roles is what the term loop follows of a group's replica
// (replication.Group).
type roles interface {
	Leader() (model.NodeID, model.Term)
	// Writable: it leads and its engine accepts appends.
	Writable() bool
	// Leads: it leads, its appends open or held (a hand-off or a
	// membership change under way).
	Leads() bool
	Err() error
	// RoleChanged is signalled when any of the above may have changed.
	RoleChanged() <-chan struct{}
}

// termRetry is how long a failed start of a term waits before the next.
const termRetry = time.Second

// termLoop starts a group's serving period when the member's replica
// comes to lead it with appends open, and ends it when leadership ends or
// moves to a later term, until ctx ends or the replica fails.
type termLoop struct {
	group model.GroupID
	raft  roles
	clock Clock
	log   *slog.Logger
	// start begins serving the replica's current term; end stops it.
	start func(ctx context.Context) (Serving, error)
	end   func(Serving)
}

// run is the loop. It wakes on the replica's role changes, and to retry a
// failed start.
func (l *termLoop) run(ctx context.Context) error {
	var cur Serving
	var curTerm model.Term
	var retry <-chan time.Time
	for {
		if err := l.raft.Err(); err != nil {
			if cur != nil {
				l.end(cur)
			}
			return fmt.Errorf("replica of group %d: %w", l.group, err)
		}
		_, raftTerm := l.raft.Leader()
		switch {
		case cur == nil && retry == nil && l.raft.Writable():
			s, err := l.start(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				l.log.Error("serving as leader failed; retrying", "group", l.group, "err", err)
				retry = l.clock.After(termRetry)
				break
			}
			cur, curTerm = s, raftTerm
		case cur != nil && (!l.raft.Leads() || raftTerm != curTerm):
			// A leader holding appends (a hand-off or a membership change
			// under way) still leads its term: it goes on serving.
			l.end(cur)
			cur = nil
			continue // a later term may be writable already
		}
		select {
		case <-ctx.Done():
			if cur != nil {
				l.end(cur)
			}
			return nil
		case <-l.raft.RoleChanged():
		case <-retry:
			retry = nil
		}
	}
}

// termCommitWait bounds how long a new leader waits for the records it
// holds to be committed before it builds its state machines.
const termCommitWait = 10 * time.Second

// waitTermCommitted waits until everything the engine holds is committed.
// A new leader's log may end in records of earlier terms that it cannot
// count as committed until a record of its own term is: readers (and the
// state machines built from the log: offsets, POP leases, timers,
// transactions) see only committed records, so a broker built before then
// would start from a state missing the last leader's final records, and
// the state machines that apply their records as they write them would
// never apply those.
func waitTermCommitted(ctx context.Context, e *storage.Engine) error {
	tk := e.Ticket()
	ctx, cancel := context.WithTimeout(ctx, termCommitWait)
	defer cancel()
	if err := e.WaitDurable(ctx, e.WrittenEnd(), tk); err != nil {
		return fmt.Errorf("waiting for the log to be committed: %w", err)
	}
	return nil
}

// served is a serving period with what the member logs of it.
type served struct {
	Serving
	started time.Time
}

// leadGroup runs group gr's term loop over its replica r, serving through
// srv, with the leader's housekeeping beside it (tendGroup), so that a slow
// metadata call or hand-off never delays the end of a term.
func (m *Member) leadGroup(ctx context.Context, gr *Group, r *Replica, srv Server) error {
	tctx, stopTending := context.WithCancel(ctx)
	tended := make(chan struct{})
	go func() { defer close(tended); m.tendGroup(tctx, gr, r) }()
	defer func() { stopTending(); <-tended }()
	l := &termLoop{group: gr.id, raft: r.Raft, clock: m.clock, log: m.log,
		start: func(ctx context.Context) (Serving, error) {
			start := m.clock.Now()
			if err := waitTermCommitted(ctx, r.Engine); err != nil {
				return nil, err
			}
			// State machines are rebuilt from the log alone: the
			// checkpoint sections the engine opened with may predate
			// records applied since.
			r.Engine.DropOpenedSections()
			s, err := srv.Serve(ctx, gr, r)
			if err != nil {
				return nil, err
			}
			_, tm := r.Raft.Leader()
			m.log.Info("leading: serving clients", "group", gr.id, "term", tm, "took", m.clock.Now().Sub(start))
			return served{Serving: s, started: m.clock.Now()}, nil
		},
		end: func(s Serving) {
			ending := m.clock.Now()
			s.End()
			// Checkpoints stop capturing the closed broker's state
			// machines.
			r.Engine.DropOpenedSections()
			m.log.Info("no longer leading: relaying clients to the leader", "group", gr.id,
				"served", ending.Sub(s.(served).started).Round(time.Millisecond), "took", m.clock.Now().Sub(ending))
		},
	}
	return l.run(ctx)
}
