// Package replication replicates a storage engine's commit log with Raft
// (go.etcd.io/raft/v3): one Raft group per replication group, whose Raft
// log is the commit log itself — no second write-ahead log.
//
// The leader's engine writes records as a single node does (offsets
// assigned under the log lock, one write and one fsync per batch) while
// this node leads; each written record is handed off in index order and
// proposed at the index and term it already carries, so Raft's log and
// the commit log agree entry for entry. Replicas store what Raft tells
// them (the leader's records verbatim, Raft's own entries as control
// records), cut divergent tails, persist the hard state in a small file,
// and acknowledge once the records are durable under the engine's policy
// (fsynced in sync mode, written in async mode). The commit index moves
// the engine's visibility and releases the appends waiting for it.
//
// Raft runs with PreVote, CheckQuorum and asynchronous storage writes: one
// goroutine drives the RawNode, one stores entries (so an fsync never
// stalls heartbeats), and the transport carries messages between nodes.
package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// Transport carries Raft messages to other nodes. Send must not block for
// long: a message it cannot deliver is dropped (Raft retransmits).
type Transport interface {
	Send(group model.GroupID, msgs []*pb.Message)
}

// Config configures one replica of a group.
type Config struct {
	Group  model.GroupID
	Node   model.NodeID
	Voters []model.NodeID // the group's initial members
	// Learners are the initial non-voting members: with Voters, the
	// membership of a group this node joins (empty: it starts as the
	// group was made).
	Learners []model.NodeID
	// OnMembership, when set, is told (on the group's goroutine; keep it
	// short) the membership after every change applied.
	OnMembership func(Membership)
	// Dir holds the group's Raft state file (hard state and membership).
	Dir string
	// Engine is this replica's storage, opened with Replicated set and its
	// OnWritten routed to Handoff.Written.
	Engine    *storage.Engine
	Handoff   *Handoff
	Transport Transport
	// Tick is Raft's clock (100 ms); a follower that hears nothing for
	// ElectionTicks (10) ticks — randomised up to twice that — campaigns,
	// and a leader sends heartbeats every HeartbeatTicks (1).
	Tick           time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// MaxSizePerMsg bounds the entries of one append message (1 MiB);
	// MaxInflightMsgs (64) and MaxInflightBytes (16 MiB) what is in flight
	// to one follower — with the transport's queue, what a slow follower
	// can make the leader hold.
	MaxSizePerMsg    uint64
	MaxInflightMsgs  int
	MaxInflightBytes uint64
	// OnRoleChange, when set, is told (on the group's goroutine; keep it
	// short) when the leader or term changes; leader is 0 while unknown.
	OnRoleChange func(leader model.NodeID, term model.Term)
	// FetchSnapshot, when set, fetches the image of the engine a snapshot
	// names (the leader's, at its index) and leaves it complete for
	// storage.InstallImage: the replica then stops with
	// ErrRestartToInstall, and its node installs the image as it starts
	// again. It runs on the storage goroutine. Without it a replica that
	// needs records its leader no longer holds stops with an error.
	// It returns the group's membership as the image's source knew it
	// (none: the snapshot's holds).
	FetchSnapshot func(ctx context.Context, from model.NodeID, index model.Index) (Membership, error)
	Logger        *slog.Logger
}

// ErrRestartToInstall stops a replica that fetched a snapshot: its node
// installs it (storage.InstallImage) as it starts again.
var ErrRestartToInstall = errors.New("a snapshot of the group was fetched: restart to install it")

// Handoff carries the records a leader's engine writes to its group, in
// index order. Create it before opening the engine and pass Written as the
// engine's OnWritten.
//
// Each batch is copied into a buffer of the handoff's own, which goes back
// to a free list once proposed: Raft copies what it is proposed, so the
// buffers are reused instead of a new one per batch (a leader's allocation
// — its garbage collection and page faults — was a fifth of its CPU).
type Handoff struct {
	mu     sync.Mutex
	chunks [][]byte
	free   [][]byte // buffers to reuse, at most handoffFree
	signal chan struct{}
}

// handoffFree bounds the buffers a handoff keeps for reuse, and
// handoffMaxKept the size of one it keeps.
const (
	handoffFree    = 8
	handoffMaxKept = 4 << 20
)

// NewHandoff returns an empty handoff.
func NewHandoff() *Handoff { return &Handoff{signal: make(chan struct{}, 1)} }

// Written queues a copy of written records (called under the log's append
// lock with the log's pieces of them).
func (h *Handoff) Written(records [][]byte, size int64) {
	h.mu.Lock()
	var b []byte
	for i := len(h.free) - 1; i >= 0; i-- {
		if int64(cap(h.free[i])) >= size {
			b = h.free[i][:0]
			h.free = append(h.free[:i], h.free[i+1:]...)
			break
		}
	}
	h.mu.Unlock()
	if b == nil {
		// Rounded up, so that a buffer fits the batches after it.
		b = make([]byte, 0, max(64<<10, 1<<bits.Len64(uint64(size-1))))
	}
	for _, r := range records {
		b = append(b, r...)
	}
	h.mu.Lock()
	h.chunks = append(h.chunks, b)
	h.mu.Unlock()
	select {
	case h.signal <- struct{}{}:
	default:
	}
}

func (h *Handoff) take() [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chunks
	h.chunks = nil
	return c
}

// release takes back buffers nothing refers to any more (proposed: Raft
// holds copies; or dropped).
func (h *Handoff) release(chunks [][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range chunks {
		if len(h.free) < handoffFree && cap(c) <= handoffMaxKept {
			h.free = append(h.free, c)
		}
	}
}

// Group is this node's replica of one replication group.
type Group struct {
	cfg    Config
	log    *slog.Logger
	engine *storage.Engine
	store  *logStorage
	rn     *raft.RawNode

	inbox chan *pb.Message
	calls chan func()
	// Work for the storage goroutine, and the responses it returns to the
	// Raft goroutine (both unbounded: Raft's flow control bounds them).
	work      queue[storeWork]
	responses queue[*pb.Message]

	// Raft goroutine state.
	raftLast uint64 // the last index in Raft's log as the Ready stream told it
	leading  bool   // Raft says this node leads
	open     bool   // the engine accepts appends (leading, and caught up)
	held     bool   // appends held (not open) for a membership change in this term
	term     uint64
	// confIndex is the index of the last membership change this leader
	// proposed (one at a time: the next waits until it is applied).
	confIndex uint64

	leader    atomic.Int32
	termSeen  atomic.Uint64
	elections atomic.Int64 // leadership changes seen
	writable  atomic.Bool  // mirrors open
	holding   atomic.Bool  // mirrors held
	// roles is signalled (never blocking; one pending signal) whenever the
	// leader, the term, writable, holding or the error change.
	roles chan struct{}
	// transferTo is the member a hand-off this node asked for goes to
	// (Raft goroutine).
	transferTo model.NodeID
	status     atomic.Pointer[Status]
	ticks      int
	// heard is the tick at which each peer's last message arrived (Raft
	// goroutine): a replica not heard from within inSyncTicks is out of
	// sync whatever its log holds.
	heard map[uint64]int
	// caughtUp is the tick at which each replica last held everything
	// committed within InSyncLag (Raft goroutine).
	caughtUp map[uint64]int
	// caughtUpTerm is the term caughtUp is of: a new leader knows nothing of
	// its followers' logs until they answer, and counts them caught up as
	// of its election (Kafka's ISR carries over a leader change).
	caughtUpTerm uint64
	// campaignTicks: campaign at each of this many next ticks while no
	// leader is known (the leader is gone, PeerGone; Raft goroutine).
	campaignTicks int
	campaignWait  int // ticks before campaignTicks start
	goneLeader    model.NodeID
	// lostLogAt: when this leader last handed its group off for a replica
	// that lost its log (Raft goroutine).
	lostLogAt time.Time
	// openWait is when openEngine first found the engine not yet holding
	// Raft's log in the current wait; openWaitLogged: that was reported.
	openWait       time.Time
	openWaitLogged bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	stopMu sync.Mutex
	err    atomic.Pointer[error]
}

// storeWork is one item for the storage goroutine, processed in order.
type storeWork struct {
	append    *pb.Message   // MsgStorageAppend
	truncate  bool          // cut records Raft does not hold (never proposed)
	openTerm  uint64        // open the engine for appends in this term
	confState *pb.ConfState // persist the membership
}

// Start starts the replica.
func Start(cfg Config) (*Group, error) {
	if cfg.Engine == nil || cfg.Handoff == nil || cfg.Transport == nil {
		return nil, fmt.Errorf("%w: replication needs an engine, a handoff and a transport", model.ErrInvalidConfig)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = 10
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.MaxSizePerMsg == 0 {
		cfg.MaxSizePerMsg = 1 << 20
	}
	if cfg.MaxInflightMsgs <= 0 {
		cfg.MaxInflightMsgs = 64
	}
	if cfg.MaxInflightBytes == 0 {
		cfg.MaxInflightBytes = 16 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := openState(cfg.Dir, nodeIDs(cfg.Voters), nodeIDs(cfg.Learners))
	if err != nil {
		return nil, err
	}
	g := &Group{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "replication", "group", cfg.Group),
		engine: cfg.Engine,
		inbox:  make(chan *pb.Message, 4096),
		calls:  make(chan func(), 64),
		roles:  make(chan struct{}, 1),
	}
	g.work.init()
	g.responses.init()
	g.store = &logStorage{node: cfg.Node, engine: cfg.Engine, state: st}
	last := uint64(cfg.Engine.LastIndex())
	g.store.stable.Store(last)
	g.raftLast = last
	// The commit index Raft restarts from: what the engine knows committed
	// (its checkpoint lies at a committed point), never past the log.
	applied := uint64(cfg.Engine.CommitIndex())
	cur := st.load()
	if cur.Commit < applied || cur.Commit > last {
		cur.Commit = min(max(cur.Commit, applied), last)
		if err := st.save(cur); err != nil {
			return nil, err
		}
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        uint64(cfg.Node),
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   g.store,
		Applied:                   applied,
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  64 << 20,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxInflightBytes:          cfg.MaxInflightBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		AsyncStorageWrites:        true,
		DisableProposalForwarding: true,
		Logger:                    raftLogger{g.log},
	})
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	g.rn = rn
	g.leader.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.wg.Add(2)
	go func() { defer g.wg.Done(); g.run(ctx) }()
	go func() { defer g.wg.Done(); g.storeLoop(ctx) }()
	g.log.Info("replica started", "node", cfg.Node, "voters", cfg.Voters, "last_index", last, "committed", applied,
		"term", cur.Term)
	return g, nil
}

// Stop stops the replica: the engine stops accepting appends and the
// goroutines end. The engine stays open (it is the caller's).
func (g *Group) Stop() {
	g.stopMu.Lock()
	defer g.stopMu.Unlock()
	if g.cancel == nil {
		return
	}
	g.cancel()
	g.wg.Wait()
	g.cancel = nil
	g.writable.Store(false)
	g.holding.Store(false)
	g.engine.SetFollower()
	g.signalRoles()
}

// Deliver hands a message from another node to the group. It never
// blocks: when the inbox is full the message is dropped, as a network
// would.
func (g *Group) Deliver(m *pb.Message) {
	select {
	case g.inbox <- m:
	default:
	}
}

// Unreachable tells Raft that messages to node could not be sent (it
// probes the follower again instead of streaming to it). It never blocks.
func (g *Group) Unreachable(node model.NodeID) {
	select {
	case g.calls <- func() { g.rn.ReportUnreachable(uint64(node)) }:
	default:
	}
}

// PeerGone tells the replica that node's process is gone: its connection
// ended with an end of stream or a reset, as a killed process's do (a cut
// network times out instead). A follower whose leader node was stops
// waiting out its election timeout: its timer is advanced past the
// leader's lease (it grants votes at once), and the voter with the lowest
// id among the others campaigns from its next tick on (the others have
// heard the same by then), the others a few ticks later should it not win,
// instead of all of them waiting up to two election timeouts after the
// leader's last heartbeat. Elections stay Raft's: a
// leader that is in fact alive keeps its group (pre-votes fail while its
// other followers hear from it). It never blocks.
func (g *Group) PeerGone(node model.NodeID) {
	select {
	case g.calls <- func() { g.peerGone(node) }:
	default:
	}
}

// When the leader is gone, the voter with the lowest id campaigns at each
// of the next goneCampaignTicks ticks while no leader is known (its first
// pre-vote may reach a voter that has not heard yet); the others do the
// same goneCampaignWait ticks later, should it not win (its log may be
// behind theirs, which they then refuse to vote for).
const (
	goneCampaignTicks = 5
	goneCampaignWait  = 3
)

func (g *Group) peerGone(node model.NodeID) {
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateFollower || st.Lead != uint64(node) {
		return
	}
	for range g.cfg.ElectionTicks {
		g.rn.Tick()
	}
	first := model.NodeID(0)
	for id := range g.rn.Status().Config.Voters.IDs() {
		if n := model.NodeID(id); n != node && (first == 0 || n < first) {
			first = n
		}
	}
	g.campaignTicks, g.goneLeader, g.campaignWait = goneCampaignTicks, node, 0
	if first != g.cfg.Node {
		g.campaignWait = goneCampaignWait
	}
	g.log.Info("the group's leader is gone: election timer advanced", "leader", node, "campaigns_first", first == g.cfg.Node)
}

// call runs fn on the Raft goroutine (dropped if the group is stopping).
func (g *Group) call(fn func()) bool {
	select {
	case g.calls <- fn:
		return true
	default:
		// Rare: a full call queue; try once more without blocking the
		// caller for long.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case g.calls <- fn:
			return true
		case <-t.C:
			return false
		}
	}
}

// ReportSnapshot tells Raft whether a follower fetched the snapshot it was
// sent (it then streams entries after it, or sends another). It never
// blocks.
func (g *Group) ReportSnapshot(node model.NodeID, ok bool) {
	status := raft.SnapshotFailure
	if ok {
		status = raft.SnapshotFinish
	}
	select {
	case g.calls <- func() { g.rn.ReportSnapshot(uint64(node), status) }:
	default:
	}
}

// Engine is the replica's engine.
func (g *Group) Engine() *storage.Engine { return g.engine }

// Leader returns the node this replica believes leads the group (0 when
// none is known) and the term.
func (g *Group) Leader() (model.NodeID, model.Term) {
	return model.NodeID(g.leader.Load()), model.Term(g.termSeen.Load())
}

// Status is what a replica knows of its group.
type Status struct {
	Group    model.GroupID
	Node     model.NodeID
	Leader   model.NodeID // 0 while unknown
	Term     uint64
	Role     string // leader, follower, candidate, pre-candidate
	Commit   uint64
	Applied  uint64
	Last     uint64 // the last index this replica stores
	Writable bool
	// Voters and Learners: the group's membership as this replica applied it.
	Voters, Learners []model.NodeID
	// Replicas: every member's progress as the leader sees it (the leader
	// alone knows it; empty elsewhere).
	Replicas []ReplicaProgress
	At       time.Time
}

// ReplicaProgress is one replica's progress.
type ReplicaProgress struct {
	Node  model.NodeID
	Match uint64 // the last index known to be stored there
	State string // probe, replicate, snapshot
	Lag   uint64 // entries behind the commit index
	// Learner: the replica receives the log but does not vote (yet).
	Learner bool
	// Active: the leader itself, or a replica the leader heard from within
	// the failure-detection time (twice the election timeout: the longest a
	// follower waits for its leader before campaigning).
	Active bool
	// CaughtUp: the replica held everything committed (within InSyncLag)
	// at some time in the last InSyncLagTime.
	CaughtUp bool
}

// InSyncLag is how many committed entries a replica may lack and count as
// caught up (a batch in flight).
const InSyncLag = 1024

// InSyncLagTime is how long a live replica may go without catching up and
// stay in sync (Kafka's replica.lag.time.max.ms is 30 s): a follower a
// burst of writes keeps a little behind is not dropped from the ISR for
// it.
const InSyncLagTime = 10 * time.Second

// InSync is the voters the leader holds in sync — Kafka's ISR: heard from
// within the failure-detection time and caught up within InSyncLagTime.
// Empty unless this replica leads.
func (s Status) InSync() []model.NodeID {
	var out []model.NodeID
	for _, p := range s.Replicas {
		if !p.Learner && p.Active && p.CaughtUp {
			out = append(out, p.Node)
		}
	}
	return out
}

// Status returns the replica's status as of the last refresh (every five
// ticks).
func (g *Group) Status() Status {
	if st := g.status.Load(); st != nil {
		return *st
	}
	return Status{Group: g.cfg.Group, Node: g.cfg.Node}
}

func (g *Group) publishStatus() {
	rs := g.rn.Status()
	st := &Status{Group: g.cfg.Group, Node: g.cfg.Node, Leader: model.NodeID(rs.Lead), Term: rs.GetTerm(),
		Role: rs.RaftState.String(), Commit: rs.GetCommit(), Applied: rs.Applied, Last: g.raftLast,
		Writable: g.open, At: time.Now()}
	st.Role = strings.ToLower(strings.TrimPrefix(st.Role, "State"))
	for id, pr := range rs.Progress {
		lag := uint64(0)
		if pr.Match < st.Commit {
			lag = st.Commit - pr.Match
		}
		heard, ok := g.heard[id]
		active := id == uint64(g.cfg.Node) || ok && g.ticks-heard <= 2*g.cfg.ElectionTicks
		if g.caughtUp == nil {
			g.caughtUp = map[uint64]int{}
		}
		if g.caughtUpTerm != st.Term {
			delete(g.caughtUp, id)
			if active {
				g.caughtUp[id] = g.ticks
			}
		}
		if lag <= InSyncLag {
			g.caughtUp[id] = g.ticks
		}
		caught, ok := g.caughtUp[id]
		st.Replicas = append(st.Replicas, ReplicaProgress{Node: model.NodeID(id), Match: pr.Match,
			State: strings.ToLower(strings.TrimPrefix(pr.State.String(), "State")), Lag: lag, Learner: pr.IsLearner,
			Active: active, CaughtUp: ok && time.Duration(g.ticks-caught)*g.cfg.Tick <= InSyncLagTime})
	}
	if len(rs.Progress) > 0 {
		g.caughtUpTerm = st.Term
	}
	m := membershipOfConfig(rs.Config)
	st.Voters, st.Learners = m.Voters, m.Learners
	sort.Slice(st.Replicas, func(i, j int) bool { return st.Replicas[i].Node < st.Replicas[j].Node })
	g.status.Store(st)
}

// TransferLeadership asks Raft to hand leadership to node (caught up first)
// and waits until another node leads or ctx ends. Appends are held at once
// (they wait rather than fail).
func (g *Group) TransferLeadership(ctx context.Context, to model.NodeID) error {
	if !g.call(func() {
		if g.leading {
			// Proposals would be dropped during the transfer: appends
			// are held after what was written is proposed. New appends
			// and those waiting for their commit wait: when the transfer
			// fails (the target could not take over), the log opens
			// again in the same term (run's tick) and they go on; when
			// it succeeds, those not written fail as on any loss of
			// leadership and those written wait for the new leader to
			// commit them (handOffEngine).
			g.holdAppends()
			g.transferTo = to
			g.rn.TransferLeader(uint64(to))
		}
	}) {
		return fmt.Errorf("%w: replica busy", model.ErrClosed)
	}
	for {
		if l, _ := g.Leader(); l != g.cfg.Node && l != 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			g.abortTransfer()
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// abortTransfer gives up a hand-off that did not complete in time: Raft
// stops waiting for the target (a transfer to the leader itself aborts
// one under way) and the log opens again at once, rather than staying
// closed until Raft's own transfer timeout.
func (g *Group) abortTransfer() {
	g.call(func() {
		g.transferTo = 0
		if g.leading && g.rn.BasicStatus().LeadTransferee != 0 {
			g.rn.TransferLeader(uint64(g.cfg.Node))
			g.work.push(storeWork{openTerm: g.term})
		}
	})
}

// LeaderChanges counts the times this replica saw a new leader.
func (g *Group) LeaderChanges() int64 { return g.elections.Load() }

// Writable reports whether this replica leads and its engine accepts
// appends.
func (g *Group) Writable() bool { return g.writable.Load() }

// Leads reports whether this replica leads with its engine accepting
// appends or holding them (a hand-off or a membership change under way:
// they go on in the same term if it leads on, and nothing written was cut).
func (g *Group) Leads() bool { return g.writable.Load() || g.holding.Load() }

// RoleChanged is signalled whenever what Leader, Writable, Leads or Err
// report may have changed: a loop that follows the replica's role waits on
// it instead of polling. One signal is kept while nobody waits.
func (g *Group) RoleChanged() <-chan struct{} { return g.roles }

func (g *Group) signalRoles() {
	select {
	case g.roles <- struct{}{}:
	default:
	}
}

// Err returns the error that stopped the replica, if any.
func (g *Group) Err() error {
	if p := g.err.Load(); p != nil {
		return *p
	}
	return nil
}

// fail stops the replica after a storage error it cannot go on from.
func (g *Group) fail(err error) {
	if g.err.CompareAndSwap(nil, &err) {
		if errors.Is(err, ErrRestartToInstall) {
			g.log.Warn("replica stopped to install a snapshot")
		} else {
			g.log.Error("replica stopped: storage failed", "err", err)
		}
		g.writable.Store(false)
		g.holding.Store(false)
		g.engine.SetFollower()
		g.cancel()
		g.signalRoles()
	}
}

// run is the Raft goroutine.
func (g *Group) run(ctx context.Context) {
	tick := time.NewTicker(g.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			g.rn.Tick()
			if g.campaignTicks > 0 && g.campaignWait > 0 {
				g.campaignWait--
			} else if g.campaignTicks > 0 {
				g.campaignTicks--
				st := g.rn.BasicStatus()
				if st.RaftState == raft.StatePreCandidate || st.RaftState == raft.StateFollower && (st.Lead == 0 || st.Lead == uint64(g.goneLeader)) {
					_ = g.rn.Campaign()
				} else {
					g.campaignTicks = 0
				}
			}
			if g.ticks++; g.ticks%5 == 0 {
				g.publishStatus()
				if g.leading && !g.open {
					// Opening is asked for on election and after each
					// membership change; asked again here so that no lost
					// request leaves a leader closed (openEngine does
					// nothing when there is nothing to do).
					g.work.push(storeWork{openTerm: g.term})
				}
			}
		case m := <-g.inbox:
			g.step(m)
			for n := 0; n < 256; n++ {
				select {
				case m := <-g.inbox:
					g.step(m)
					continue
				default:
				}
				break
			}
		case <-g.cfg.Handoff.signal:
			g.propose()
		case <-g.responses.signal:
			for _, m := range g.responses.take() {
				g.step(m)
			}
		case fn := <-g.calls:
			fn()
		}
		g.ready()
	}
}

func (g *Group) step(m *pb.Message) {
	if from := m.GetFrom(); from != uint64(g.cfg.Node) {
		if g.heard == nil {
			g.heard = map[uint64]int{}
		}
		g.heard[from] = g.ticks
	}
	if m.GetType() == pb.MsgHeartbeat && m.GetCommit() > g.raftLast {
		// A leader names the commit index it believes this replica holds;
		// a replica that lost its log (a replaced disk) holds less, and
		// Raft would stop on a commit index past its log. Capped, the
		// leader finds out from the appends it is refused and sends what
		// is missing, or a snapshot.
		m.Commit = new(g.raftLast)
	}
	if m.GetType() == pb.MsgAppResp && m.GetReject() && g.leading {
		g.lostLog(m)
	}
	if err := g.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
		g.log.Debug("raft step", "type", m.GetType(), "from", m.GetFrom(), "err", err)
	}
}

// lostLogEvery bounds how often a leader hands its group off for replicas
// that lost their log.
const lostLogEvery = 10 * time.Second

// lostLog handles a refusal of appends from below what the follower had
// acknowledged: its log is gone (a replaced disk, or a crash that lost what
// it had acknowledged). Raft never moves a follower's progress below what
// it acknowledged, so this leader would probe it there forever and never
// send the snapshot it needs; a new leader starts knowing nothing of it,
// finds out and sends one. So the leader hands the group to another voter
// that holds everything it wrote (Raft goroutine).
func (g *Group) lostLog(m *pb.Message) {
	st := g.rn.Status()
	from := m.GetFrom()
	pr, ok := st.Progress[from]
	if !ok || m.GetIndex() < pr.Match || m.GetRejectHint() >= pr.Match || g.transferTo != 0 || time.Since(g.lostLogAt) < lostLogEvery {
		return // a stale refusal, or a divergent tail Raft resolves itself
	}
	g.lostLogAt = time.Now()
	var to uint64
	for id := range st.Config.Voters.IDs() {
		if id != from && id != uint64(g.cfg.Node) && st.Progress[id].Match >= g.raftLast && (to == 0 || id < to) {
			to = id
		}
	}
	if to == 0 {
		g.log.Warn("a replica lost its log and no other voter holds everything to take the group over", "replica", from,
			"acknowledged", pr.Match, "holds", m.GetRejectHint())
		return
	}
	g.log.Warn("a replica lost its log: handing the group to a voter holding everything, whose probe sends it a snapshot",
		"replica", from, "acknowledged", pr.Match, "holds", m.GetRejectHint(), "to", to)
	g.holdAppends()
	g.transferTo = model.NodeID(to)
	g.rn.TransferLeader(to)
}

// propose proposes the records the engine wrote, at the indexes they hold.
func (g *Group) propose() {
	chunks := g.cfg.Handoff.take()
	// Raft copies the entries it is proposed (and a follower, which
	// forwards none, proposes nothing): the buffers are free after.
	defer g.cfg.Handoff.release(chunks)
	if len(chunks) == 0 || !g.open {
		return // written before the engine closed: cut with the rest
	}
	var ents []*pb.Entry
	for _, c := range chunks {
		for off := 0; off < len(c); {
			h, err := commitlog.DecodeHeader(c[off:])
			if err != nil {
				g.abandonWrites(fmt.Sprintf("undecodable handoff: %v", err))
				return
			}
			if uint64(h.Index) != g.raftLast+1 || uint64(h.Term) != g.term {
				g.abandonWrites(fmt.Sprintf("record %d of term %d does not follow Raft's %d in term %d", h.Index, h.Term, g.raftLast, g.term))
				return
			}
			g.raftLast++
			ents = append(ents, &pb.Entry{Data: c[off : off+int(h.Length)]})
			off += int(h.Length)
		}
	}
	err := g.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(uint64(g.cfg.Node)), Entries: ents})
	if err != nil {
		g.abandonWrites(fmt.Sprintf("proposal refused: %v", err))
	}
}

// abandonWrites closes the engine, drops what it wrote past Raft's log and
// opens it again if this node still leads.
func (g *Group) abandonWrites(why string) {
	g.log.Warn("written records not proposed; cutting them", "why", why)
	g.closeEngine()
	if g.leading {
		g.work.push(storeWork{openTerm: g.term})
	}
}

// closeEngine stops appends on this node and cuts what Raft does not hold.
func (g *Group) closeEngine() {
	g.stopAppends(g.engine.SetFollower)
}

// handOffEngine is closeEngine after a hand-off this node asked for: the
// member taking over holds everything proposed (Raft hands off only to a
// member caught up with the leader's log), so appends waiting for their
// commit keep waiting for it (storage.Engine.HandOff).
func (g *Group) handOffEngine() {
	g.stopAppends(g.engine.HandOff)
}

func (g *Group) stopAppends(closeLog func()) {
	if g.open || g.held {
		closeLog()
		g.open, g.held = false, false
		g.writable.Store(false)
		g.holding.Store(false)
		g.signalRoles()
	}
	g.cfg.Handoff.release(g.cfg.Handoff.take())
	g.raftLast = g.store.stable.Load()
	g.work.push(storeWork{truncate: true})
}

// ready handles what Raft has to do.
func (g *Group) ready() {
	for g.rn.HasReady() {
		rd := g.rn.Ready()
		var becameLeader bool
		if rd.SoftState != nil || !raft.IsEmptyHardState(rd.HardState) {
			st := g.rn.BasicStatus()
			leading := st.RaftState == raft.StateLeader
			if g.leading && !leading {
				if g.transferTo != 0 {
					g.handOffEngine()
				} else {
					g.closeEngine()
				}
				g.transferTo = 0
			}
			becameLeader = leading && (!g.leading || st.GetTerm() != g.term)
			g.leading, g.term = leading, st.GetTerm()
			if lead, term := int32(st.Lead), st.GetTerm(); lead != g.leader.Load() || term != g.termSeen.Load() {
				if lead != 0 && lead != g.leader.Load() {
					g.elections.Add(1)
				}
				g.leader.Store(lead)
				g.termSeen.Store(term)
				g.log.Info("group leadership", "leader", lead, "term", term, "self", g.cfg.Node)
				g.publishStatus()
				if g.cfg.OnRoleChange != nil {
					g.cfg.OnRoleChange(model.NodeID(lead), model.Term(term))
				}
				g.signalRoles()
			}
		}
		var local, remote []*pb.Message
		for _, m := range rd.Messages {
			switch m.GetTo() {
			case raft.LocalAppendThread:
				if n := len(m.Entries); n > 0 {
					g.raftLast = m.Entries[n-1].GetIndex()
					g.store.recent.add(m.Entries)
				}
				g.work.push(storeWork{append: m})
			case raft.LocalApplyThread:
				local = append(local, g.apply(m)...)
			default:
				remote = append(remote, m)
			}
		}
		if len(remote) > 0 {
			g.cfg.Transport.Send(g.cfg.Group, remote)
		}
		if becameLeader {
			// Once everything Raft holds is stored, the engine opens.
			g.work.push(storeWork{openTerm: g.term})
		}
		for _, m := range local {
			g.step(m)
		}
	}
}

// apply applies committed entries: membership changes, then the commit
// index to the engine.
func (g *Group) apply(m *pb.Message) []*pb.Message {
	if n := len(m.Entries); n > 0 {
		for _, e := range m.Entries {
			switch e.GetType() {
			case pb.EntryConfChange, pb.EntryConfChangeV2:
				g.applyConfChange(e)
			}
		}
		if err := g.engine.Commit(context.Background(), model.Index(m.Entries[n-1].GetIndex())); err != nil {
			g.log.Error("commit", "index", m.Entries[n-1].GetIndex(), "err", err)
		}
	}
	return m.Responses
}

func (g *Group) applyConfChange(e *pb.Entry) {
	var cc pb.ConfChangeI
	if e.GetType() == pb.EntryConfChange {
		var c pb.ConfChange
		if err := proto.Unmarshal(e.Data, &c); err != nil {
			g.log.Error("undecodable membership change", "index", e.GetIndex(), "err", err)
			return
		}
		cc = &c
	} else {
		var c pb.ConfChangeV2
		if err := proto.Unmarshal(e.Data, &c); err != nil {
			g.log.Error("undecodable membership change", "index", e.GetIndex(), "err", err)
			return
		}
		cc = &c
	}
	cs := g.rn.ApplyConfChange(cc)
	g.work.push(storeWork{confState: cs})
	m := membershipOf(cs)
	g.log.Info("group membership changed", "index", e.GetIndex(), "voters", m.Voters, "learners", m.Learners)
	g.publishStatus()
	if g.cfg.OnMembership != nil {
		g.cfg.OnMembership(m)
	}
}
