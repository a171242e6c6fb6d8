package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// storeLoop is the storage goroutine: it stores entries and hard state,
// cuts and opens the engine, in the order the Raft goroutine asked.
func (g *Group) storeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.work.signal:
		}
		for _, w := range g.work.take() {
			if ctx.Err() != nil {
				return
			}
			var err error
			switch {
			case w.append != nil:
				err = g.store.storeAppend(ctx, w.append, g)
			case w.truncate:
				err = g.engine.TruncateAfter(model.Index(g.store.stable.Load()))
			case w.openTerm != 0:
				term := w.openTerm
				if !g.call(func() { g.openEngine(term) }) {
					g.work.push(storeWork{openTerm: term}) // the Raft goroutine was busy: later
				}
			case w.confState != nil:
				st := g.store.state.load()
				st.Voters, st.Learners = w.confState.Voters, w.confState.Learners
				err = g.store.state.save(st)
			}
			if err != nil {
				if ctx.Err() == nil {
					g.fail(err)
				}
				return
			}
		}
	}
}

// openWaitWarn is how long a leader waits for its log to open before it
// says so.
const openWaitWarn = 2 * time.Second

// openEngine opens the engine for appends in term if this node still leads
// in it and the engine holds exactly Raft's log (Raft goroutine).
func (g *Group) openEngine(term uint64) {
	if !g.leading || g.term != term || g.open {
		return
	}
	if g.rn.BasicStatus().LeadTransferee != 0 {
		return // handing leadership off: opened again if that fails (run's tick)
	}
	if last := uint64(g.engine.LastIndex()); last != g.raftLast {
		// Raft's entries are still being stored; asked again after them.
		if g.openWait.IsZero() {
			g.openWait = time.Now()
		} else if !g.openWaitLogged && time.Since(g.openWait) > openWaitWarn {
			g.openWaitLogged = true
			g.log.Warn("leading, but the log is not open for appends yet", "term", term, "engine_last", last,
				"raft_last", g.raftLast, "membership_change", g.held, "waited", time.Since(g.openWait).Round(time.Millisecond))
		}
		g.work.push(storeWork{openTerm: term})
		return
	}
	g.openWait, g.openWaitLogged = time.Time{}, false
	open := g.engine.SetLeader
	if g.held {
		// After a membership change in the same term: the appends
		// waiting for their commit stay valid.
		open = g.engine.ResumeAppends
	}
	last, err := open(model.Term(term))
	if err != nil {
		g.log.Error("open the log as leader", "term", term, "err", err)
		return
	}
	if !g.held {
		g.log.Info("leading: appends open", "term", term, "last_index", last)
	}
	g.raftLast = uint64(last)
	g.open, g.held = true, false
	g.writable.Store(true)
	g.holding.Store(false) // after writable: Leads stays true throughout
	g.signalRoles()
	g.publishStatus()
}

// storeAppend stores one MsgStorageAppend and delivers its responses once
// what it carries is durable.
func (s *logStorage) storeAppend(ctx context.Context, m *pb.Message, g *Group) error {
	if snap := m.Snapshot; snap != nil {
		return g.fetchSnapshot(ctx, snap)
	}
	if ents := m.Entries; len(ents) > 0 {
		k := s.stored(ents)
		if k < len(ents) {
			first := model.Index(ents[k].GetIndex())
			if first <= s.engine.LastIndex() {
				if err := s.engine.TruncateAfter(first - 1); err != nil {
					return fmt.Errorf("cut a divergent tail after %d: %w", first-1, err)
				}
			}
			batch := make([]commitlog.IndexedEntry, 0, len(ents)-k)
			for _, e := range ents[k:] {
				batch = append(batch, commitlog.IndexedEntry{Index: model.Index(e.GetIndex()), Term: model.Term(e.GetTerm()), Data: recordOf(e)})
			}
			if err := s.engine.AppendEntries(ctx, batch); err != nil {
				return fmt.Errorf("store entries from %d: %w", first, err)
			}
		}
		last := model.Index(ents[len(ents)-1].GetIndex())
		if err := s.engine.WaitIndexDurable(ctx, last); err != nil {
			return err
		}
		s.stable.Store(uint64(last))
	}
	if m.Term != nil || m.Vote != nil {
		st := s.state.load()
		if m.GetTerm() != st.Term || m.GetVote() != st.Vote {
			st.Term, st.Vote, st.Commit = m.GetTerm(), m.GetVote(), m.GetCommit()
			if err := s.state.save(st); err != nil {
				return err
			}
		}
	}
	var remote []*pb.Message
	for _, r := range m.Responses {
		if r.GetTo() == uint64(g.cfg.Node) || raft.IsLocalMsgTarget(r.GetTo()) {
			g.responses.push(r)
		} else {
			remote = append(remote, r)
		}
	}
	if len(remote) > 0 {
		g.cfg.Transport.Send(g.cfg.Group, remote)
	}
	return nil
}

// stored returns how many leading entries the engine already holds (the
// leader's own records, written before they were proposed).
func (s *logStorage) stored(ents []*pb.Entry) int {
	last := uint64(s.engine.LastIndex())
	n := 0
	for n < len(ents) && ents[n].GetIndex() <= last {
		n++
	}
	if n == 0 {
		return 0
	}
	// Records of one term at one index are the same record everywhere
	// (only that term's leader made it): when the first and last entries
	// in range match in term and share it, so does everything between.
	match := func(e *pb.Entry) bool {
		t, err := s.engine.TermAt(model.Index(e.GetIndex()))
		return err == nil && uint64(t) == e.GetTerm()
	}
	if ents[0].GetTerm() == ents[n-1].GetTerm() && match(ents[0]) && match(ents[n-1]) {
		return n
	}
	k := 0
	for k < n && match(ents[k]) {
		k++
	}
	return k
}

// queue is an unbounded FIFO with a wake-up signal, for one consumer.
type queue[T any] struct {
	mu     sync.Mutex
	items  []T
	signal chan struct{}
	once   sync.Once
}

func (q *queue[T]) init() { q.once.Do(func() { q.signal = make(chan struct{}, 1) }) }

func (q *queue[T]) push(v T) {
	q.init()
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *queue[T]) take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.items
	q.items = nil
	return v
}

// fetchSnapshot fetches the image a snapshot names; the replica then stops
// for its node to restart and install it (the snapshot is not
// acknowledged: the leader learns of the fetch from its source).
func (g *Group) fetchSnapshot(ctx context.Context, snap *pb.Snapshot) error {
	index := model.Index(snap.GetMetadata().GetIndex())
	var src snapshotSource
	if err := json.Unmarshal(snap.Data, &src); err != nil || src.Node == 0 {
		return fmt.Errorf("%w: snapshot at %d names no source", model.ErrCorruptRecord, index)
	}
	if g.cfg.FetchSnapshot == nil {
		return fmt.Errorf("the group's log from %d is gone from its leader, and this replica cannot fetch snapshots", index)
	}
	g.log.Warn("the leader no longer holds the records this replica needs: fetching its image", "from", src.Node, "index", index,
		"last_index", g.engine.LastIndex())
	start := time.Now()
	// Until it has the image the replica is of no use: it keeps trying,
	// from the group's leader of the moment (any leader's image will do:
	// it holds what was committed).
	var members Membership
	for from := src.Node; ; {
		var err error
		members, err = g.cfg.FetchSnapshot(ctx, from, index)
		if err == nil {
			break
		}
		g.log.Warn("fetching the snapshot failed; trying again", "from", from, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if l, _ := g.Leader(); l != 0 && l != g.cfg.Node {
			from = l
		}
	}
	// The membership the snapshot was taken with is the replica's once it
	// restarts (a member that joined after the records it skips knows
	// its group from nowhere else).
	cs := snap.GetMetadata().GetConfState()
	if len(members.Voters) > 0 { // as of the image, later than the snapshot's
		cs = &pb.ConfState{Voters: nodeIDs(members.Voters), Learners: nodeIDs(members.Learners)}
	}
	if cs != nil && len(cs.Voters) > 0 {
		st := g.store.state.load()
		st.Voters, st.Learners = cs.Voters, cs.Learners
		if err := g.store.state.save(st); err != nil {
			return err
		}
	}
	g.log.Warn("snapshot fetched: restarting to install it", "index", index, "took", time.Since(start).Round(time.Millisecond))
	return ErrRestartToInstall
}
