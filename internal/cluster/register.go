package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// fencedWait bounds how long a node on a fresh directory waits for its
// predecessor's registration to lapse (its lease, 3 s).
const fencedWait = 15 * time.Second

// Start joins the cluster as a starting node does. alone (a node with no
// replicas sharing etcd) refuses when another node is live in the cluster
// (name names it in the error): such nodes do not replicate one another,
// so each needs its own cluster. A node on a fresh directory (incarnation
// 1, a replaced disk) waits for the registration of its dead predecessor
// to lapse with that process's lease, a few seconds after it died.
func Start(ctx context.Context, store meta.Store, node Node, opts MembershipOptions, name string, alone bool) (*Membership, error) {
	refuseOthers := func() error {
		if !alone {
			return nil
		}
		nodes, err := Nodes(ctx, store)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.ID != node.ID {
				return fmt.Errorf("%w: cluster %q already has node %d live; nodes do not replicate one another yet, so each needs its own cluster.name",
					model.ErrInvalidConfig, name, n.ID)
			}
		}
		return nil
	}
	if err := refuseOthers(); err != nil {
		return nil, err
	}
	m, err := Join(ctx, store, node, opts)
	for start := time.Now(); errors.Is(err, ErrFenced) && node.Incarnation == 1 && time.Since(start) < fencedWait; {
		if opts.Logger != nil {
			opts.Logger.Warn("an earlier process of this node is still registered; waiting for its registration to lapse", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		m, err = Join(ctx, store, node, opts)
	}
	if err != nil {
		return nil, err
	}
	if err := refuseOthers(); err != nil { // another joined at the same time
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = m.Leave(lctx)
		return nil, err
	}
	return m, nil
}
