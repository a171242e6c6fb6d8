package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/member"
	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/serving"
	"github.com/rosettamq/rosetta/internal/storage"
)

// openMeta opens the metadata store: the node's own (meta.db in the data
// directory), or the cluster's etcd under /rosetta/<cluster.name>/.
func openMeta(ctx context.Context, cfg Config, endpoints []string, tlsCfg *tls.Config, log *slog.Logger) (meta.Store, error) {
	if len(endpoints) == 0 {
		return meta.OpenBolt(filepath.Join(cfg.DataDir, "meta.db"))
	}
	s, err := meta.OpenEtcd(ctx, meta.EtcdConfig{Endpoints: endpoints, Prefix: "/rosetta/" + cfg.Cluster.Name + "/", TLS: tlsCfg, Logger: log})
	if err != nil {
		return nil, err // (not a nil *EtcdStore in the interface)
	}
	return s, nil
}

// openMetaWaiting opens the cluster's etcd, waiting up to two minutes for
// it to answer: a node that runs no etcd member of its own (a protocol-only
// node, a member past the fifth) may start before the members' etcd has
// formed.
func (a *App) openMetaWaiting(ctx context.Context) (meta.Store, error) {
	for deadline := time.Now().Add(2 * time.Minute); ; {
		s, err := openMeta(ctx, a.cfg, a.etcdEndpoints(), a.member.EtcdTLS(), a.log)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return s, err
		}
		a.log.Info("waiting for the cluster's etcd", "err", err)
		time.Sleep(time.Second)
	}
}

// etcdEndpoints are the client URLs of the cluster's etcd: cluster.etcd_endpoints,
// or the members' embedded etcd (none for a node on its own store).
func (a *App) etcdEndpoints() []string {
	if a.member != nil {
		return a.member.EtcdEndpoints()
	}
	return etcdEndpointList(a.cfg.Cluster.EtcdEndpoints)
}

// etcdEndpointList reads cluster.etcd_endpoints.
func etcdEndpointList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// newMember prepares the node as a cluster member before its metadata
// and engine open: the embedded etcd member starts, and sc (the node's
// engine, group 0's) becomes a replica's.
func (a *App) newMember(ctx context.Context, sc *storage.Config) error {
	members, err := a.cfg.Cluster.members()
	if err != nil {
		return err
	}
	self := model.NodeID(a.cfg.NodeID)
	if _, ok := members[self]; !ok && a.cfg.Cluster.Join != "" {
		if err := a.joinThrough(ctx, etcdEndpointList(a.cfg.Cluster.Join)); err != nil {
			return err
		}
		members[self] = a.cfg.Listen.Host
	}
	a.member, err = member.New(ctx, member.Config{
		Self:              model.NodeID(a.cfg.NodeID),
		DataDir:           a.cfg.DataDir,
		Cluster:           a.cfg.Cluster.Name,
		Members:           members,
		EtcdEndpoints:     etcdEndpointList(a.cfg.Cluster.EtcdEndpoints),
		EtcdPort:          a.cfg.Cluster.EtcdPort,
		RaftPort:          a.cfg.Cluster.RaftPort,
		Secret:            a.cfg.Cluster.Secret,
		TLS:               a.cfg.Cluster.TLS,
		Groups:            a.cfg.Cluster.Groups,
		MaxGroups:         maxGroups,
		ReplicationFactor: a.cfg.Cluster.ReplicationFactor,
		Logger:            a.log,
		CallErrors:        serving.CallErrors,
		NewState:          a.newGroupState,
	}, sc)
	return err
}

// joinWait bounds how long a member joining a running cluster asks the
// members of cluster.join to add it.
const joinWait = 5 * time.Minute

// joinThrough asks a running member's admin API (one of urls, in turn) to
// add this node as a member on its listen.host, as `rosetta cluster member
// add` does, until one has (a member already is one).
func (a *App) joinThrough(ctx context.Context, urls []string) error {
	body, _ := json.Marshal(map[string]any{"node": a.cfg.NodeID, "host": a.cfg.Listen.Host})
	deadline := time.Now().Add(joinWait)
	for i := 0; ; i++ {
		u := strings.TrimSuffix(urls[i%len(urls)], "/") + "/api/v1/cluster/members"
		rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, u, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode < 300 {
				cancel()
				a.log.Info("added to the cluster as a member", "through", u, "host", a.cfg.Listen.Host)
				return nil
			}
			err = fmt.Errorf("%s: %s %s", u, resp.Status, bytes.TrimSpace(msg))
		}
		cancel()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("joining the cluster: %w", err)
		}
		a.log.Info("asking a member to add this node", "err", err)
		time.Sleep(2 * time.Second)
	}
}

// joinCluster registers the node in its cluster's etcd: with its
// replicas as a member, alone otherwise (cluster.Start).
func (a *App) joinCluster(ctx context.Context) (*cluster.Membership, error) {
	id := a.engine.Identity()
	endpoints := map[string]string{}
	for name, addr := range map[string]string{"kafka": a.cfg.Listen.Kafka, "remoting": a.cfg.Listen.Remoting, "grpc": a.cfg.Listen.GRPC, "http": a.cfg.Listen.HTTP} {
		if addr != "" {
			endpoints[name] = addr
		}
	}
	if a.cfg.Listen.KafkaAdvertised != "" {
		endpoints["kafka"] = a.cfg.Listen.KafkaAdvertised
	}
	self := model.NodeID(a.cfg.NodeID)
	m, err := cluster.Start(ctx, a.meta, cluster.Node{ID: self, Incarnation: id.Incarnation, Endpoints: endpoints},
		cluster.MembershipOptions{Logger: a.log, ClusterID: id.ClusterID}, a.cfg.Cluster.Name, !a.replicated())
	if err != nil {
		return nil, err
	}
	a.log.Info("joined the cluster", "cluster", a.cfg.Cluster.Name, "cluster_id", m.ClusterID(), "node", self, "incarnation", id.Incarnation)
	return m, nil
}

// clusterID is the identity Kafka clients are told: the cluster's when the
// node is in one, its own otherwise.
func (a *App) clusterID() string {
	if a.membership != nil {
		return string(a.membership.ClusterID())
	}
	return string(a.engine.Identity().ClusterID)
}

// clusterStatus answers GET /api/v1/cluster: the live nodes (this one
// alone without etcd) and the replication groups (the node's commit log as
// group 0 without replicas).
func (a *App) clusterStatus(ctx context.Context) (admin.ClusterStatus, error) {
	self := model.NodeID(a.cfg.NodeID)
	st := admin.ClusterStatus{ClusterID: a.clusterID(), Metadata: "local", Self: self}
	if a.member == nil {
		st.Groups = []admin.GroupStatus{a.groupStatus(nil)}
	} else {
		for _, gr := range a.member.Groups() {
			st.Groups = append(st.Groups, a.groupStatus(gr))
		}
	}
	if a.membership == nil {
		id := a.engine.Identity()
		endpoints := map[string]string{}
		for _, name := range []string{"kafka", "remoting", "grpc", "http"} {
			if addr := a.Addr(name); addr != "" {
				endpoints[name] = addr
			}
		}
		st.Nodes = []admin.ClusterNode{{ID: self, Incarnation: id.Incarnation, Endpoints: endpoints, Started: a.started, Role: "member"}}
		return st, nil
	}
	st.Metadata, st.Name = "etcd", a.cfg.Cluster.Name
	nodes, err := cluster.Nodes(ctx, a.meta)
	if err != nil {
		return st, err
	}
	for _, n := range nodes {
		role := "member"
		if n.Role != "" {
			role = n.Role
		}
		st.Nodes = append(st.Nodes, admin.ClusterNode{ID: n.ID, Incarnation: n.Incarnation, Endpoints: n.Endpoints, Started: time.UnixMilli(n.Started), Role: role})
	}
	return st, nil
}

// groupStatus describes a group as this node's replica sees it, or (gr
// nil) the node's own commit log as group 0, led by the node. A group the
// node hosts no replica of is described by its published leader and its
// placement, role "none".
func (a *App) groupStatus(gr *member.Group) admin.GroupStatus {
	self := model.NodeID(a.cfg.NodeID)
	e := a.engine
	var r *member.Replica
	if gr != nil {
		if r = gr.Hosted(); r == nil {
			leader, tm := gr.Leader()
			return admin.GroupStatus{ID: gr.ID(), Leader: leader, Term: tm, Role: "none", Replicas: placement.Sorted(a.member.Placed(gr.ID())),
				Factor: a.member.FactorOf(gr.ID())}
		}
		e = r.Engine
	}
	ls := e.LogStats()
	last := ls.NextIndex
	if last > 0 {
		last--
	}
	gs := admin.GroupStatus{Leader: self, Term: e.Term(), Role: "leader", FirstIndex: ls.FirstIndex, LastIndex: last,
		DurableIndex: e.DurableIndex(), CommitIndex: e.DurableIndex(), Replicas: []model.NodeID{self}, Factor: 1}
	if gr == nil {
		return gs
	}
	gs.Factor = a.member.FactorOf(gr.ID())
	st := r.Raft.Status()
	gs.ID = gr.ID()
	gs.Leader, gs.Term, gs.Role, gs.CommitIndex = st.Leader, model.Term(st.Term), st.Role, e.CommitIndex()
	gs.Replicas, gs.Learners = st.Voters, st.Learners
	if len(gs.Replicas) == 0 {
		gs.Replicas = placement.Sorted(a.member.Placed(gr.ID()))
	}
	for _, p := range st.Replicas {
		gs.Progress = append(gs.Progress, admin.ReplicaProgress{Node: p.Node, Match: model.Index(p.Match), Lag: p.Lag, State: p.State})
	}
	return gs
}

// clusterOps are a member's cluster endpoints.
func (a *App) clusterOps() admin.ClusterOps {
	return admin.ClusterOps{Status: a.clusterStatus, AddMember: a.member.AddMember, RemoveMember: a.member.RemoveMember,
		MoveLeader: func(ctx context.Context, g int, node model.NodeID) error { return a.member.Elect(ctx, g, node) },
		AddGroups:  a.member.AddGroups,
		MoveQueue: func(ctx context.Context, mv apiv1.QueueMove) (apiv1.QueueMove, error) {
			return a.node.MoveQueue(ctx, mv)
		}}
}

// replicated says whether the node is a member of a replicated cluster.
func (a *App) replicated() bool { return a.cfg.Cluster.Members != "" }

// leaveEarly ends the node's registration before it hands its groups off,
// so the members taking them over do not hand them back to it as their
// preferred leader while it stops.
func (a *App) leaveEarly() {
	if a.membership == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.membership.Leave(ctx); err != nil {
		a.log.Warn("leaving the cluster's registry", "err", err)
	}
}
