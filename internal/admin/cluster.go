package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rosettamq/rosetta/internal/apiv1"
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
	// Role is "member" or "protocol" (a protocol-only node).
	Role string `json:"role"`
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
	Replicas     []model.NodeID `json:"replicas"` // the voters
	// Factor is how many voters the group keeps (topics of that
	// replication factor live in it; 1 on a single node).
	Factor   int            `json:"replication_factor"`
	Learners []model.NodeID `json:"learners,omitempty"` // members joining (not voting yet)
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

// ClusterOps answers the cluster endpoints: GET /api/v1/cluster (Status),
// and, on a cluster member, POST /api/v1/cluster/members ({"node": id,
// "host": host}) and DELETE /api/v1/cluster/members/{node} (nil: not
// offered), and POST /api/v1/cluster/groups/{group}/leader ({"node": id}:
// the group's leader hands its leadership to that member).
type ClusterOps struct {
	Status       func(context.Context) (ClusterStatus, error)
	AddMember    func(ctx context.Context, node model.NodeID, host string) error
	RemoveMember func(ctx context.Context, node model.NodeID) error
	MoveLeader   func(ctx context.Context, group int, node model.NodeID) error
	// AddGroups adds n replication groups of factor voters (0: the
	// cluster's) and returns their ids.
	AddGroups func(ctx context.Context, n, factor int) ([]model.GroupID, error)
	// MoveQueue moves a topic's queue to another replication group
	// (POST /api/v1/topics/{topic}/queues/{queue}/move {"to_group": g}).
	MoveQueue func(ctx context.Context, move apiv1.QueueMove) (apiv1.QueueMove, error)
}

// register adds the cluster endpoints to mux.
func (c ClusterOps) register(mux *http.ServeMux, sec Security) {
	if c.Status != nil {
		mux.HandleFunc("GET /api/v1/cluster", sec.guard(clusterHandler(c.Status)))
	}
	if c.AddMember != nil {
		mux.HandleFunc("POST /api/v1/cluster/members", sec.guard(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Node model.NodeID `json:"node"`
				Host string       `json:"host"`
			}
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req); err != nil {
				apiError(w, http.StatusBadRequest, "bad_request", "want {\"node\": id, \"host\": host}: "+err.Error())
				return
			}
			if err := c.AddMember(r.Context(), req.Node, req.Host); err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, map[string]any{"added": req.Node, "host": req.Host})
		}))
	}
	if c.RemoveMember != nil {
		mux.HandleFunc("DELETE /api/v1/cluster/members/{node}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
			id, err := strconv.Atoi(r.PathValue("node"))
			if err != nil || id <= 0 {
				apiError(w, http.StatusBadRequest, "bad_request", "a member is named by its node id")
				return
			}
			if err := c.RemoveMember(r.Context(), model.NodeID(id)); err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, map[string]any{"removed": id})
		}))
	}
	if c.AddGroups != nil {
		mux.HandleFunc("POST /api/v1/cluster/groups", sec.guard(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Count             int `json:"count"`
				ReplicationFactor int `json:"replication_factor"`
			}
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req); err != nil || req.Count <= 0 {
				apiError(w, http.StatusBadRequest, "bad_request", "want {\"count\": n, \"replication_factor\": 0, 1, 3 or 5}")
				return
			}
			ids, err := c.AddGroups(r.Context(), req.Count, req.ReplicationFactor)
			if err != nil {
				writeErr(w, err)
				return
			}
			w.WriteHeader(http.StatusCreated)
			writeJSON(w, map[string]any{"added": ids})
		}))
	}
	if c.MoveQueue == nil {
		mux.HandleFunc("POST /api/v1/topics/{topic}/queues/{queue}/move", sec.guard(func(w http.ResponseWriter, r *http.Request) {
			apiError(w, http.StatusBadRequest, "invalid_request", "this node holds every queue in its one replication group: queues move between the groups of a cluster")
		}))
	} else {
		mux.HandleFunc("POST /api/v1/topics/{topic}/queues/{queue}/move", sec.guard(func(w http.ResponseWriter, r *http.Request) {
			var req apiv1.QueueMove
			q, err := strconv.Atoi(r.PathValue("queue"))
			if err == nil {
				err = json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req)
			}
			if err != nil || q < 0 || req.ToGroup < 0 {
				apiError(w, http.StatusBadRequest, "bad_request", "want a queue number in the path and {\"to_group\": g}")
				return
			}
			req.Topic, req.Queue = r.PathValue("topic"), q
			done, err := c.MoveQueue(r.Context(), req)
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, done)
		}))
	}
	if c.MoveLeader != nil {
		mux.HandleFunc("POST /api/v1/cluster/groups/{group}/leader", sec.guard(func(w http.ResponseWriter, r *http.Request) {
			g, err := strconv.Atoi(r.PathValue("group"))
			var req struct {
				Node model.NodeID `json:"node"`
			}
			if err == nil {
				err = json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req)
			}
			if err != nil || g < 0 || req.Node <= 0 {
				apiError(w, http.StatusBadRequest, "bad_request", "want a group number in the path and {\"node\": id}")
				return
			}
			if err := c.MoveLeader(r.Context(), g, req.Node); err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, map[string]any{"group": g, "leader": req.Node})
		}))
	}
}

// StandbyHandler is the admin API of a cluster member that does not lead
// its group: metrics, health and the cluster's status here; everything
// else through forward (the leader's answer), or, without one, a 503
// naming the leader's admin address.
func StandbyHandler(m *Metrics, log *slog.Logger, sec Security, cluster ClusterOps, leader func() string, forward http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.gatherer(), promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"status": "ok", "role": "follower"})
	})
	cluster.register(mux, sec)
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
