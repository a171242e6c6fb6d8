package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rosettamq/rosetta/internal/model"
)

// ClusterStatus is what GET /api/v1/cluster answers: the cluster, its live
// nodes and its replication groups, with each group's leader, term and log
// indexes (one group on this node until queues replicate).
type ClusterStatus struct {
	ClusterID string        `json:"cluster_id"`
	Name      string        `json:"name,omitempty"`
	Metadata  string        `json:"metadata"` // "local" (the node's own store) or "etcd"
	Self      model.NodeID  `json:"self"`
	Nodes     []ClusterNode `json:"nodes"`
	Groups    []GroupStatus `json:"groups"`
}

// ClusterNode is one live node.
type ClusterNode struct {
	ID          model.NodeID      `json:"id"`
	Incarnation int64             `json:"incarnation"`
	Endpoints   map[string]string `json:"endpoints,omitempty"`
	Started     time.Time         `json:"started"`
}

// GroupStatus is one replication group: its leader and term, the range of
// record indexes it holds, the index durable on its leader and the index
// committed (applied by readers).
type GroupStatus struct {
	ID           model.GroupID  `json:"id"`
	Leader       model.NodeID   `json:"leader"`
	Term         model.Term     `json:"term"`
	Role         string         `json:"role,omitempty"` // this node's role in the group
	FirstIndex   model.Index    `json:"first_index"`
	LastIndex    model.Index    `json:"last_index"`
	DurableIndex model.Index    `json:"durable_index"`
	CommitIndex  model.Index    `json:"commit_index"`
	Replicas     []model.NodeID `json:"replicas"`
	// Progress of each replica as the leader sees it (the leader's answer
	// only).
	Progress []ReplicaProgress `json:"progress,omitempty"`
}

// ReplicaProgress is how far one replica of a group has stored the log.
type ReplicaProgress struct {
	Node  model.NodeID `json:"node"`
	Match model.Index  `json:"match"`
	Lag   uint64       `json:"lag"`
	State string       `json:"state"`
}

// StandbyHandler is the admin API of a cluster member that does not lead
// its group: metrics, health and the cluster's status here; everything
// else through forward (the leader's answer), or, without one, a 503
// naming the leader's admin address.
func StandbyHandler(m *Metrics, log *slog.Logger, sec Security, cluster func(context.Context) (ClusterStatus, error), leader func() string, forward http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.gatherer(), promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"status": "ok", "role": "follower"})
	})
	mux.HandleFunc("GET /api/v1/cluster", sec.guard(clusterHandler(cluster)))
	if forward != nil {
		mux.Handle("/", forward)
		return mux
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		msg := "this node does not lead its replication group; no leader is known"
		if l := leader(); l != "" {
			msg = "this node does not lead its replication group; ask the leader at " + l
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "not_leader", "message": msg}})
	})
	return mux
}

func clusterHandler(status func(context.Context) (ClusterStatus, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := status(r.Context())
		if err != nil {
			httpError(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}
}
