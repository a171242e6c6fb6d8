// Package route says where a queue lives: which replication group holds it,
// which node leads that group and in which epoch. Every front-end asks it
// before serving a queue, so a cluster only swaps the Resolver; a single
// node answers "here" for every queue.
package route

import (
	"github.com/rosettamq/rosetta/internal/model"
)

// Location is where one queue lives.
type Location struct {
	Group  model.GroupID
	Leader model.NodeID // -1 while no leader is known
	Epoch  model.Epoch  // the leader's epoch for the queue
	Local  bool         // this node leads the queue and serves it
}

// Resolver locates queues. Implementations are safe for concurrent use and
// cheap: front-ends call them on every request.
type Resolver interface {
	Locate(q model.QueueID) Location
}

// Local is the single-node resolver: this node leads every queue, in its
// storage engine's epoch.
type Local struct {
	Node  model.NodeID
	Epoch func() model.Epoch
}

// Locate returns this node.
func (l Local) Locate(model.QueueID) Location {
	return Location{Group: 0, Leader: l.Node, Epoch: l.Epoch(), Local: true}
}

// Check returns a *model.NotLeaderError unless loc is local.
func Check(q model.QueueID, loc Location) error {
	if loc.Local {
		return nil
	}
	return &model.NotLeaderError{Queue: q, Leader: loc.Leader, Epoch: loc.Epoch}
}
