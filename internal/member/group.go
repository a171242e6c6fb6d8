package member

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/member/directory"
	"github.com/rosettamq/rosetta/internal/member/image"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/member/relay"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Group is one replication group as this member sees it: its replica here
// while the member hosts one (group 0, whose engine is the node's, on
// every member), else its leader as published in the metadata. One group
// is one RocketMQ broker; its queues are the topics' queues route.GroupOf
// gives it.
type Group struct {
	id model.GroupID
	// local is this member's replica of the group (nil while it hosts
	// none).
	local atomic.Pointer[Replica]
	// dir knows the group's leader as its leader published it.
	dir    *directory.Directory
	relays relay.Set
	// imagesServed and imagesInstalled count snapshots (engine images)
	// sent whole to replicas and fetched whole from a leader.
	imagesServed, imagesInstalled atomic.Int64
}

// Replica is a member's replica of a group it hosts: its engine (group
// 0's in data_dir/storage, group g's in data_dir/groups/<g>/storage), its
// Raft group and the state checkpointed with its log.
type Replica struct {
	Engine  *storage.Engine
	Raft    *replication.Group
	State   State
	handoff *replication.Handoff
}

// ID is the group's id.
func (g *Group) ID() model.GroupID { return g.id }

// Hosted is this member's replica of the group (nil: it hosts none).
func (g *Group) Hosted() *Replica { return g.local.Load() }

// Relays tracks the group's relayed client connections.
func (g *Group) Relays() *relay.Set { return &g.relays }

// ImagesServed and ImagesInstalled count engine images sent whole to a
// replica and installed here.
func (g *Group) ImagesServed() int64    { return g.imagesServed.Load() }
func (g *Group) ImagesInstalled() int64 { return g.imagesInstalled.Load() }

// Leader is the group's leader and its term: as this member's replica
// knows them, or as the leader published them when the member hosts no
// replica (0 while none is known).
func (g *Group) Leader() (model.NodeID, model.Term) {
	if r := g.local.Load(); r != nil {
		return r.Raft.Leader()
	}
	if p, ok := g.dir.PublishedLeader(g.id); ok {
		return p.Node, p.Term
	}
	return 0, 0
}

// InSync is the group's in-sync voters (Kafka's ISR) and whether they are
// known: the leader's own view when this member leads the group, else the
// set its leader published for the term this member knows (false before
// any was published, or when it is of another term).
func (g *Group) InSync() ([]model.NodeID, bool) {
	leader, tm := g.Leader()
	if leader == 0 {
		return nil, false
	}
	if r := g.local.Load(); r != nil && leader == g.dir.Self() {
		st := r.Raft.Status()
		if st.Leader != g.dir.Self() || len(st.Replicas) == 0 {
			return nil, false
		}
		return st.InSync(), true
	}
	p, ok := g.dir.PublishedLeader(g.id)
	if !ok || p.Node != leader || p.Term != tm || len(p.ISR) == 0 {
		return nil, false
	}
	return p.ISR, true
}

// groupsKey holds the cluster's number of replication groups.
const groupsKey = "cluster/groups"

// replicationFactorKey holds the cluster's replication factor.
const replicationFactorKey = "cluster/replication-factor"

// resolveGroups settles how many replication groups the cluster has
// before their engines open: cluster.groups when set; else as the cluster
// was made (recorded in the metadata); else, for a cluster being made, one
// group per member (a cluster made before groups were recorded, which has
// topics already, has one).
func (m *Member) resolveGroups(ctx context.Context) error {
	if m.cfg.Groups == 0 {
		kv, err := m.store.Get(ctx, groupsKey)
		switch {
		case err == nil:
			n, perr := strconv.Atoi(string(kv.Value))
			if perr != nil || n < 1 || n > m.cfg.MaxGroups {
				return fmt.Errorf("%w: the cluster's recorded groups %q", model.ErrInvalidConfig, kv.Value)
			}
			m.cfg.Groups = n
		case errors.Is(err, meta.ErrNotFound):
			topics, err := m.store.List(ctx, "topics/")
			if err != nil {
				return err
			}
			m.cfg.Groups = 1
			if len(topics) == 0 {
				m.cfg.Groups = min(len(m.Members()), m.cfg.MaxGroups)
			}
		default:
			return err
		}
		m.log.Info("replication groups", "groups", m.cfg.Groups)
	}
	added, _, err := m.loadAdded(ctx)
	if err != nil {
		return err
	}
	m.growTo(added)
	return nil
}

// MadeGroups is the number of replication groups the cluster was made
// with (at least one): topics recorded before each queue's group was
// spread over them, and consumer groups and transactional ids are
// coordinated by one of them (Kafka's hash of the id). Groups added later
// follow (Groups).
func (m *Member) MadeGroups() int { return max(m.cfg.Groups, 1) }

// CheckGroups keeps the number of groups as the cluster was made with:
// the first member to start records it in the metadata, and a member
// configured otherwise refuses to start (queues would move between
// groups).
func (m *Member) CheckGroups(ctx context.Context) error {
	want := strconv.Itoa(m.MadeGroups())
	if _, err := m.store.Get(ctx, groupsKey); errors.Is(err, meta.ErrNotFound) && want != "1" {
		// A cluster made before groups were recorded has one.
		if topics, err := m.store.List(ctx, "topics/"); err != nil {
			return err
		} else if len(topics) > 0 {
			return fmt.Errorf("%w: cluster.groups is %s but the cluster was made with one group (it cannot change)", model.ErrInvalidConfig, want)
		}
	}
	_, err := m.store.Txn(ctx, []meta.Compare{{Key: groupsKey, Target: meta.CompareCreate}}, []meta.Op{{Key: groupsKey, Value: []byte(want)}})
	if !errors.Is(err, meta.ErrConflict) {
		return err
	}
	kv, err := m.store.Get(ctx, groupsKey)
	if err != nil {
		return err
	}
	if string(kv.Value) != want {
		return fmt.Errorf("%w: cluster.groups is %s but the cluster was made with %s groups (it cannot change)", model.ErrInvalidConfig, want, kv.Value)
	}
	return nil
}

// resolveReplicationFactor settles the cluster's replication factor: as
// the cluster was made (recorded in the metadata by its first member, from
// cluster.replication_factor or the default; five — every member — for a
// cluster that ran before it was recorded); a member configured otherwise
// refuses to start (the groups' copies would move).
func (m *Member) resolveReplicationFactor(ctx context.Context) error {
	want := m.cfg.ReplicationFactor
	if want == 0 {
		want = placement.DefaultReplicationFactor
		// A cluster that ran before the factor was recorded had every
		// member in every group: it keeps them (up to five), rather than
		// losing copies as it starts on this version.
		if _, err := m.store.Get(ctx, directory.GroupMembersKey(0)); err == nil {
			want = placement.MaxReplicationFactor
		} else if !errors.Is(err, meta.ErrNotFound) {
			return err
		}
	}
	_, err := m.store.Txn(ctx, []meta.Compare{{Key: replicationFactorKey, Target: meta.CompareCreate}},
		[]meta.Op{{Key: replicationFactorKey, Value: []byte(strconv.Itoa(want))}})
	if err != nil && !errors.Is(err, meta.ErrConflict) {
		return err
	}
	kv, err := m.store.Get(ctx, replicationFactorKey)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(string(kv.Value))
	if err != nil || n < 1 || n > placement.MaxReplicationFactor {
		return fmt.Errorf("%w: the cluster's recorded replication factor %q", model.ErrCorruptRecord, kv.Value)
	}
	if m.cfg.ReplicationFactor != 0 && n != m.cfg.ReplicationFactor {
		return fmt.Errorf("%w: cluster.replication_factor is %d but the cluster was made with %d (it cannot change)",
			model.ErrInvalidConfig, m.cfg.ReplicationFactor, n)
	}
	m.factor = n
	return nil
}

// openEngine opens this member's engine of group g (g > 0; group 0's is
// the node's engine), with its own state, installing an image fetched
// before the last stop.
func (m *Member) openEngine(g model.GroupID) (*Replica, error) {
	r := &Replica{handoff: replication.NewHandoff(), State: m.cfg.NewState(g)}
	sc := m.engineBase
	sc.Dir = filepath.Join(placement.GroupDir(m.cfg.DataDir, g), "storage")
	sc.OnWritten = r.handoff.Written
	sc.StateKeepers = r.State.Keepers()
	sc.Logger = m.log.With("group", g)
	if sc.Tier != nil {
		t := *sc.Tier
		t.KeyPrefix = fmt.Sprintf("g%d/", g)
		sc.Tier = &t
	}
	if err := m.InstallImage(sc.Dir, g); err != nil {
		return nil, err
	}
	e, err := storage.Open(sc)
	if err != nil {
		return nil, fmt.Errorf("group %d storage: %w", g, err)
	}
	r.Engine = e
	return r, nil
}

// hostedEngines opens, as the member starts, the engines of the groups
// 1.. it hosts (hostsAtStart).
func (m *Member) hostedEngines(ctx context.Context, base storage.Config) error {
	m.engineBase = base
	for _, gr := range m.Groups()[1:] {
		ok, err := m.hostsAtStart(ctx, gr.id)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		r, err := m.openEngine(gr.id)
		if err != nil {
			return err
		}
		m.opened[gr.id] = r
	}
	return nil
}

// hostsAtStart says whether this member starts with a replica of group g:
// group 0 always; another when the placement names it, it ran one before
// (its Raft state is on disk) or the group's leader has it as a member.
func (m *Member) hostsAtStart(ctx context.Context, g model.GroupID) (bool, error) {
	if g == 0 || slices.Contains(m.Placed(g), m.cfg.Self) {
		return true, nil
	}
	if _, err := os.Stat(filepath.Join(placement.GroupDir(m.cfg.DataDir, g), "raft", "state.json")); err == nil {
		return true, nil
	}
	gm, ok, err := m.dir.GroupMembership(ctx, g)
	return ok && gm.Has(m.cfg.Self), err
}

// startReplica starts this member's Raft replica of group gr over its
// open engine (waiting, for a replica new to the group, until the group's
// leader has added it) and makes it the member's.
func (m *Member) startReplica(ctx context.Context, gr *Group, r *Replica) error {
	voters, learners, err := m.initialMembership(ctx, gr)
	if err != nil {
		return fmt.Errorf("group %d: %w", gr.id, err)
	}
	r.Raft, err = replication.Start(replication.Config{
		Group:     gr.id,
		Node:      m.cfg.Self,
		Voters:    voters,
		Learners:  learners,
		Dir:       filepath.Join(placement.GroupDir(m.cfg.DataDir, gr.id), "raft"),
		Engine:    r.Engine,
		Handoff:   r.handoff,
		Transport: m.transport,
		FetchSnapshot: func(ctx context.Context, from model.NodeID, _ model.Index) (replication.Membership, error) {
			return image.Fetch(ctx, m.peers, gr.id, r.Engine.Config().Dir, from, m.log)
		},
		OnRoleChange: func(model.NodeID, model.Term) {
			gr.relays.CloseUpstreams() // relayed connections follow the leader
			if gr.id == 0 {
				m.kafkaRelays.CloseUpstreams()
			}
		},
		Logger: m.log,
	})
	if err != nil {
		return fmt.Errorf("group %d: %w", gr.id, err)
	}
	m.transport.Register(r.Raft)
	gr.local.Store(r)
	return nil
}

// joinWait bounds how long a joining member waits for a group to add it.
const joinWait = time.Minute

// initialMembership is the membership a replica of group gr starts with:
// none for one that has run before (its own record holds); for a new one,
// the group's as its leader published it — waiting until this member is
// in it — or, for a group being made, every member as a voter.
func (m *Member) initialMembership(ctx context.Context, gr *Group) (voters, learners []model.NodeID, err error) {
	state := filepath.Join(placement.GroupDir(m.cfg.DataDir, gr.id), "raft", "state.json")
	if _, err := os.Stat(state); err == nil {
		return placement.Sorted(m.Placed(gr.id)), nil, nil // read from its state file
	}
	deadline := m.clock.Now().Add(joinWait)
	for {
		gm, published, err := m.dir.GroupMembership(ctx, gr.id)
		if err != nil {
			return nil, nil, err
		}
		if !published {
			return placement.Sorted(m.Placed(gr.id)), nil, nil // the group is being made
		}
		if gm.Has(m.cfg.Self) {
			m.log.Info("joining the group", "group", gr.id, "voters", gm.Voters, "learners", gm.Learners)
			return gm.Voters, gm.Learners, nil
		}
		if m.clock.Now().After(deadline) {
			return nil, nil, fmt.Errorf("group %d has not added this node after %v (its leader adds members the cluster records)", gr.id, joinWait)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-m.clock.After(membershipInterval):
		}
	}
}
