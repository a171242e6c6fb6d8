package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
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
	FirstIndex   model.Index    `json:"first_index"`
	LastIndex    model.Index    `json:"last_index"`
	DurableIndex model.Index    `json:"durable_index"`
	Replicas     []model.NodeID `json:"replicas"`
}

// LocalGroup describes the node's own commit log as group 0, led by self.
func LocalGroup(b *broker.Broker, self model.NodeID) GroupStatus {
	e := b.Engine()
	st := e.LogStats()
	last := st.NextIndex
	if last > 0 {
		last--
	}
	return GroupStatus{ID: 0, Leader: self, Term: e.Term(), FirstIndex: st.FirstIndex, LastIndex: last,
		DurableIndex: e.DurableIndex(), Replicas: []model.NodeID{self}}
}

func clusterHandler(status func(context.Context) (ClusterStatus, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}
}
