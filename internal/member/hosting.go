package member

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// hosting runs the term loops of the groups this member hosts and starts
// and drops replicas as the placement changes. Group 0, which serves
// every listener and the node-wide state, has every member as a voter.
// A member hosts a replica of another group while it is one of the
// group's voters or learners or the placement names it: it starts one
// when the placement comes to name it (its leader then adds it as a
// learner and promotes it once caught up) and drops it, files and all,
// once the group's leader has removed it. Members that host no replica of
// a group know its leader from the metadata (member/directory), where
// each leader publishes its term: they relay its connections there and
// name it to clients.
type hosting struct {
	m   *Member
	ctx context.Context
	g   *errgroup.Group
	srv Server

	mu      sync.Mutex
	running map[model.GroupID]*hostedRun
	busy    map[model.GroupID]bool // a replica being started
}

// hostedRun is a hosted group's term loop.
type hostedRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// lead runs group gr's term loop over its replica r.
func (h *hosting) lead(gr *Group, r *Replica) {
	ctx, cancel := context.WithCancel(h.ctx)
	run := &hostedRun{cancel: cancel, done: make(chan struct{})}
	h.mu.Lock()
	h.running[gr.id] = run
	h.mu.Unlock()
	h.g.Go(func() error {
		defer close(run.done)
		err := h.m.leadGroup(ctx, gr, r, h.srv)
		if gr.id == 0 || !errors.Is(err, replication.ErrRestartToInstall) || ctx.Err() != nil {
			return err // group 0's engine is the node's: the node restarts
		}
		// The replica fetched an image of its leader's engine: it
		// starts again over it, the member goes on.
		h.close(gr, r)
		h.mu.Lock()
		h.busy[gr.id] = true
		h.mu.Unlock()
		h.g.Go(func() error { h.host(h.ctx, gr); return nil })
		return nil
	})
}

// close stops replica r of group gr and closes its engine.
func (h *hosting) close(gr *Group, r *Replica) {
	gr.local.CompareAndSwap(r, nil)
	r.Raft.Stop()
	h.m.transport.Unregister(r.Raft)
	gr.relays.CloseUpstreams()
	if err := r.Engine.Close(); err != nil {
		h.m.log.Warn("closing a group replica's engine", "group", gr.id, "err", err)
	}
}

// tend starts a replica of each group the placement or the group's
// published membership names this member in, and drops the replica of
// each group whose leader removed it, until ctx ends.
func (h *hosting) tend(ctx context.Context) {
	m := h.m
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(membershipInterval):
		}
		if _, ok := m.Members()[m.cfg.Self]; !ok {
			continue // removed from the cluster: its replicas wait for it to stop
		}
		for _, gr := range m.servedGroups()[1:] {
			h.mu.Lock()
			busy := h.busy[gr.id]
			h.mu.Unlock()
			if busy {
				continue
			}
			placed := slices.Contains(m.Placed(gr.id), m.cfg.Self)
			r := gr.Hosted()
			if r != nil && placed {
				continue // hosted where it belongs
			}
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			gm, published, err := m.dir.GroupMembership(gctx, gr.id)
			cancel()
			if err != nil {
				continue
			}
			switch {
			case r == nil && (placed || gm.Has(m.cfg.Self)):
				h.mu.Lock()
				h.busy[gr.id] = true
				h.mu.Unlock()
				h.g.Go(func() error { h.host(ctx, gr); return nil })
			case r != nil && !placed && published && !gm.Has(m.cfg.Self):
				if leader, _ := r.Raft.Leader(); leader != m.cfg.Self {
					h.drop(gr)
				}
			}
		}
	}
}

// host starts a replica of group gr on this member (the group's leader
// adds it as a learner) and runs its term loop.
func (h *hosting) host(ctx context.Context, gr *Group) {
	m := h.m
	defer func() {
		h.mu.Lock()
		delete(h.busy, gr.id)
		h.mu.Unlock()
	}()
	m.log.Info("starting a replica of the group", "group", gr.id)
	r, err := m.openEngine(gr.id)
	if err == nil {
		if err = m.startReplica(ctx, gr, r); err != nil {
			_ = r.Engine.Close()
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("starting a replica of the group failed; trying again later", "group", gr.id, "err", err)
		}
		return
	}
	h.lead(gr, r)
}

// drop stops this member's replica of group gr, which its leader removed
// from the group, and deletes its files.
func (h *hosting) drop(gr *Group) {
	m := h.m
	if gr.id == 0 {
		return // group 0's files are the node's data directory
	}
	h.mu.Lock()
	run := h.running[gr.id]
	delete(h.running, gr.id)
	h.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
	r := gr.Hosted()
	if r == nil {
		return
	}
	h.close(gr, r)
	dir := placement.GroupDir(m.cfg.DataDir, gr.id)
	if err := os.RemoveAll(dir); err != nil {
		m.log.Warn("deleting a dropped replica's files", "group", gr.id, "dir", dir, "err", err)
	}
	m.log.Info("dropped the replica of a group this member no longer hosts", "group", gr.id)
}

// Run runs the member until ctx ends or a replica fails: it follows the
// recorded members and the groups' published leaders, serves each group
// it leads through srv, and starts and drops replicas as the placement
// changes. It returns once every serving period ended.
func (m *Member) Run(ctx context.Context, srv Server) error {
	m.served.Store(int32(len(m.Groups())))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { m.watchMembers(gctx); return nil })
	g.Go(func() error { m.followProtocolNodes(gctx); return nil })
	h := &hosting{m: m, ctx: gctx, g: g, srv: srv, running: map[model.GroupID]*hostedRun{}, busy: map[model.GroupID]bool{}}
	for _, gr := range m.Groups() {
		if r := gr.Hosted(); r != nil {
			h.lead(gr, r)
		}
	}
	g.Go(func() error { m.followGroups(gctx, srv.Grow); return nil })
	g.Go(func() error { h.tend(gctx); return nil })
	g.Go(func() error {
		// For the groups this member hosts no replica of: a relayed
		// connection whose group's leader changed follows it.
		m.dir.WatchLeaders(gctx, membershipInterval, func(id model.GroupID) {
			if gr := m.group(id); gr != nil && gr.Hosted() == nil {
				gr.relays.CloseUpstreams()
			}
		})
		return nil
	})
	return g.Wait()
}
