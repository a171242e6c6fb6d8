package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/grpcv5"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
)

// groupReplica is one replication group as this member sees it. While
// the member hosts a replica of the group (local: its own engine — group
// 0's is the node's engine in data_dir/storage, group g's in
// data_dir/groups/<g> — its Raft group and the producer state
// checkpointed with its log) and leads it, it runs the group's broker
// stack. A member that does not host the group (groups on a subset of the
// members, hosting.go) knows its leader from the metadata (published).
// One group is one RocketMQ broker: its queues are the topics' queues
// route.Placement gives it.
type groupReplica struct {
	id model.GroupID
	// local is this member's replica of the group (nil while it hosts
	// none; group 0 is hosted on every member).
	local atomic.Pointer[localReplica]
	// published is the group's leader as its leader published it.
	published atomic.Pointer[leaderRecord]
	// stack is the group's broker stack while this node leads it (group
	// 0's is the App's stack).
	stack  *atomic.Pointer[stack]
	relays relaySet
	// admin is the admin API over the group's broker while this node
	// leads it (what the cluster-wide API asks).
	admin atomic.Pointer[http.Handler]
	// imagesServed and imagesInstalled count snapshots (engine images)
	// sent whole to replicas and fetched whole from a leader.
	imagesServed, imagesInstalled atomic.Int64
}

// localReplica is a member's replica of a group it hosts.
type localReplica struct {
	engine    *storage.Engine
	handoff   *replication.Handoff
	raft      *replication.Group
	producers *producers.Manager
	kafkaTxns *producers.TxnIndex
}

// hosted is this member's replica of the group (nil: it hosts none).
func (gr *groupReplica) hosted() *localReplica { return gr.local.Load() }

// leader is the group's leader and its term: as this member's replica
// knows them, or as the leader published them when the member hosts no
// replica (0 while none is known).
func (gr *groupReplica) leader() (model.NodeID, model.Term) {
	if lr := gr.local.Load(); lr != nil {
		return lr.raft.Leader()
	}
	if p := gr.published.Load(); p != nil {
		return p.Node, p.Term
	}
	return 0, 0
}

// placement is the group's share of every topic's queues.
func (gr *groupReplica) placement(groups int) route.Placement {
	return route.Placement{Group: gr.id, Groups: groups}
}

// groupDir is where group g keeps its log and Raft state (group 0 in the
// data directory itself, as a node of one group always did).
func groupDir(dataDir string, g model.GroupID) string {
	if g == 0 {
		return dataDir
	}
	return filepath.Join(dataDir, "groups", strconv.Itoa(int(g)))
}

// groupBrokerName is the RocketMQ broker name of group g: the default one
// on a cluster of one group (as a single node), <cluster name>-<g>
// otherwise.
func (a *App) groupBrokerName(g model.GroupID) string {
	if a.cfg.Cluster.groups() == 1 {
		return ""
	}
	return fmt.Sprintf("%s-%d", a.cfg.Cluster.Name, g)
}

// openGroupEngine opens this member's engine of group g (g > 0; group
// 0's is the node's engine), with its own producer state, installing an
// image fetched before the last stop.
func (a *App) openGroupEngine(base storage.Config, g model.GroupID) (*localReplica, error) {
	lr := &localReplica{handoff: replication.NewHandoff()}
	sc := base
	sc.Dir = filepath.Join(groupDir(a.cfg.DataDir, g), "storage")
	sc.OnWritten = lr.handoff.Written
	lr.producers = producers.New(a.meta, producers.Options{
		Expiration: a.cfg.Broker.ProducerIDExpiration,
		MaxStates:  a.cfg.Broker.MaxProducerStates,
		Logger:     a.log,
	})
	lr.kafkaTxns = producers.NewTxnIndex()
	sc.StateKeepers = []storage.StateKeeper{lr.producers, lr.kafkaTxns}
	sc.Logger = a.log.With("group", g)
	if err := a.installImage(sc.Dir, g); err != nil {
		return nil, err
	}
	e, err := storage.Open(sc)
	if err != nil {
		return nil, fmt.Errorf("group %d storage: %w", g, err)
	}
	lr.engine = e
	return lr, nil
}

// resolveGroups settles how many replication groups the cluster has
// before their engines open: cluster.groups when set; else as the cluster
// was made (recorded in the metadata); else, for a cluster being made, one
// group per member (a cluster made before groups were recorded, which has
// topics already, has one).
func (a *App) resolveGroups(ctx context.Context) error {
	if a.cfg.Cluster.Groups == 0 {
		kv, err := a.meta.Get(ctx, groupsKey)
		switch {
		case err == nil:
			n, perr := strconv.Atoi(string(kv.Value))
			if perr != nil || n < 1 || n > maxGroups {
				return fmt.Errorf("%w: the cluster's recorded groups %q", model.ErrInvalidConfig, kv.Value)
			}
			a.cfg.Cluster.Groups = n
		case errors.Is(err, meta.ErrNotFound):
			topics, err := a.meta.List(ctx, "topics/")
			if err != nil {
				return err
			}
			a.cfg.Cluster.Groups = 1
			if len(topics) == 0 {
				a.cfg.Cluster.Groups = min(len(a.replica.members()), maxGroups)
			}
		default:
			return err
		}
		a.log.Info("replication groups", "groups", a.cfg.Cluster.Groups)
	}
	r := a.replica
	for g := len(r.groups); g < a.cfg.Cluster.groups(); g++ {
		r.groups = append(r.groups, &groupReplica{id: model.GroupID(g), stack: &atomic.Pointer[stack]{}})
	}
	return nil
}

// checkGroups keeps cluster.groups as the cluster was made with: the first
// member to start records it in the metadata, and a member configured
// otherwise refuses to start (queues would move between groups).
func (a *App) checkGroups(ctx context.Context) error {
	want := strconv.Itoa(a.cfg.Cluster.groups())
	if _, err := a.meta.Get(ctx, groupsKey); errors.Is(err, meta.ErrNotFound) && want != "1" {
		// A cluster made before groups were recorded has one.
		if topics, err := a.meta.List(ctx, "topics/"); err != nil {
			return err
		} else if len(topics) > 0 {
			return fmt.Errorf("%w: cluster.groups is %s but the cluster was made with one group (it cannot change)", model.ErrInvalidConfig, want)
		}
	}
	_, err := a.meta.Txn(ctx, []meta.Compare{{Key: groupsKey, Target: meta.CompareCreate}}, []meta.Op{{Key: groupsKey, Value: []byte(want)}})
	if !errors.Is(err, meta.ErrConflict) {
		return err
	}
	kv, err := a.meta.Get(ctx, groupsKey)
	if err != nil {
		return err
	}
	if string(kv.Value) != want {
		return fmt.Errorf("%w: cluster.groups is %s but the cluster was made with %s groups (it cannot change)", model.ErrInvalidConfig, want, kv.Value)
	}
	return nil
}

// groupsKey holds the cluster's number of replication groups.
const groupsKey = "cluster/groups"

// groupPort is the port group g's RocketMQ listeners take on every
// member: the listener's port + g.
func groupPort(addr string, g model.GroupID) (int, bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return 0, false
	}
	return p + int(g), true
}

// brokerRoutes describes every group as a RocketMQ broker to clients of
// the listener on addr (group g's at the listener's port + g): its name
// and, by broker id, the member leading it (0, absent while none does)
// and its other replicas (1..). Nil on a cluster of one group, whose
// clients keep the address they asked (see relayedAdvertise).
func (a *App) brokerRoutes(listener string) func() []remoting.BrokerRoute {
	r := a.replica
	if r == nil || len(r.groups) == 1 {
		return nil
	}
	return func() []remoting.BrokerRoute {
		out := make([]remoting.BrokerRoute, len(r.groups))
		for i, gr := range r.groups {
			br := remoting.BrokerRoute{Name: a.groupBrokerName(gr.id), Addrs: map[int64]string{}}
			port, ok := groupPort(a.Addr(listener), gr.id)
			if !ok {
				out[i] = br
				continue
			}
			addr := func(id model.NodeID) string {
				h, _ := r.hostOf(id)
				return net.JoinHostPort(h, strconv.Itoa(port))
			}
			leader, _ := gr.leader()
			if _, known := r.hostOf(leader); leader != 0 && known {
				br.Addrs[0] = addr(leader)
			}
			next := int64(1)
			for _, id := range sortedIDs(r.placedMap(gr.id)) {
				if id != leader {
					br.Addrs[next] = addr(id)
					next++
				}
			}
			out[i] = br
		}
		return out
	}
}

// grpcRoutes is brokerRoutes for the gRPC listeners.
func (a *App) grpcRoutes() func() []grpcv5.BrokerRoute {
	routes := a.brokerRoutes("grpc")
	if routes == nil {
		return nil
	}
	return func() []grpcv5.BrokerRoute {
		rs := routes()
		out := make([]grpcv5.BrokerRoute, len(rs))
		for i, r := range rs {
			out[i].Name = r.Name
			if r.Addrs[0] == "" {
				continue // no leader: its queues are left out
			}
			for id := int64(0); id < int64(len(r.Addrs)); id++ {
				out[i].Addrs = append(out[i].Addrs, r.Addrs[id])
			}
		}
		return out
	}
}

// balanceInterval is how often a leader checks whether its group's
// preferred member should lead it instead.
const balanceInterval = 2 * time.Second

// preferredLeader is the member group g prefers as its leader, spreading
// leaders over the members: the (g mod members)-th member by id.
func (r *replica) preferredLeader(g model.GroupID) model.NodeID {
	ids := sortedIDs(r.members())
	return ids[int(g)%len(ids)]
}

// handOffWait bounds a hand-off to the preferred member: appends stop
// while it is under way, so one the member cannot complete at once (still
// catching up after a restart or a partition) is given up soon and tried
// again later (balanceBackoff).
const handOffWait = 2 * time.Second

// balanceBackoff is the longest wait between hand-offs to a preferred
// member that failed (doubling from balanceInterval).
const balanceBackoff = 16 * time.Second

// balance hands the group's leadership to its preferred member once that
// member is registered (not stopping) and holds everything the group
// committed (with several groups; one group stays where elections put
// it). It reports whether a hand-off was tried and failed.
func (a *App) balance(ctx context.Context, gr *groupReplica, lr *localReplica) (failed bool) {
	r := a.replica
	if len(r.groups) == 1 {
		return false
	}
	want := r.preferredLeader(gr.id)
	st := lr.raft.Status()
	if want == r.self || st.Leader != r.self || !st.Writable {
		return false
	}
	caughtUp := false
	for _, p := range st.Replicas {
		if p.Node == want && p.State == "replicate" && p.Match >= st.Commit {
			caughtUp = true
		}
	}
	if !caughtUp {
		return false
	}
	if a.membership != nil {
		nctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		nodes, err := cluster.Nodes(nctx, a.meta)
		cancel()
		live := false
		for _, n := range nodes {
			live = live || n.ID == want
		}
		if err != nil || !live {
			return false
		}
	}
	tctx, cancel := context.WithTimeout(ctx, handOffWait)
	defer cancel()
	start := time.Now()
	if err := lr.raft.TransferLeadership(tctx, want); err != nil {
		a.log.Info("moving leadership to the preferred member failed; trying again later", "group", gr.id, "to", want,
			"err", err, "took", time.Since(start).Round(time.Millisecond))
		return true
	}
	a.log.Info("leadership moved to the group's preferred member", "group", gr.id, "to", want,
		"took", time.Since(start).Round(time.Millisecond))
	return false
}
