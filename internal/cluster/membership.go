// Package cluster is what makes several nodes one cluster over the
// metadata store: the cluster's identity, the registry of live nodes (each
// under a lease, fenced by its incarnation) and elections whose winners
// fence their writes with the election key's create revision. It works on
// any meta.Store: etcd for a cluster, the embedded store for one node.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// Keys of the cluster's metadata (under the store's own prefix).
const (
	keyClusterID = "cluster/id"
	prefixNodes  = "nodes/"
)

// ErrFenced is a node whose registration a newer incarnation of the same
// node id holds: this process must stop acting for the node.
var ErrFenced = errors.New("cluster: fenced by a newer incarnation of this node")

// Node is what a node publishes about itself.
type Node struct {
	ID          model.NodeID      `json:"id"`
	Incarnation int64             `json:"incarnation"`
	Endpoints   map[string]string `json:"endpoints"` // listener name → host:port
	Started     int64             `json:"started"`   // ms
}

// MembershipOptions tune a registration.
type MembershipOptions struct {
	// TTL is how long the node's registration outlives its last keep-alive
	// (3 s when zero; etcd raises anything under 2 s).
	TTL    time.Duration
	Logger *slog.Logger
	// ClusterID is the identity to create the cluster with when the store
	// has none yet (the node's persisted one).
	ClusterID model.ClusterID
}

// Membership is a node's registration in its cluster: a key under a lease
// kept alive until Leave, or until it is lost (Lost is closed; Err says
// why).
type Membership struct {
	store     meta.Store
	node      Node
	lease     meta.LeaseID
	clusterID model.ClusterID
	log       *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	lost   chan struct{}
	mu     sync.Mutex
	err    error
}

// NodeKey is the registry key of a node.
func NodeKey(id model.NodeID) string { return prefixNodes + strconv.Itoa(int(id)) }

// Join registers node in the cluster the store holds: it adopts the
// cluster's identity (creating it when the store has none), refuses when a
// newer incarnation of the node is registered, replaces an older one, and
// keeps the registration alive.
func Join(ctx context.Context, store meta.Store, node Node, opts MembershipOptions) (*Membership, error) {
	if opts.TTL <= 0 {
		opts.TTL = 3 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	id, err := clusterID(ctx, store, opts.ClusterID)
	if err != nil {
		return nil, err
	}
	lease, err := store.Grant(ctx, opts.TTL)
	if err != nil {
		return nil, fmt.Errorf("cluster: lease: %w", err)
	}
	if node.Started == 0 {
		node.Started = time.Now().UnixMilli()
	}
	body, err := json.Marshal(node)
	if err != nil {
		return nil, err
	}
	key := NodeKey(node.ID)
	for {
		var cmp meta.Compare
		switch kv, err := store.Get(ctx, key); {
		case errors.Is(err, meta.ErrNotFound):
			cmp = meta.Compare{Key: key} // still absent
		case err != nil:
			_ = store.Revoke(ctx, lease)
			return nil, fmt.Errorf("cluster: read %s: %w", key, err)
		default:
			var held Node
			if json.Unmarshal(kv.Value, &held) == nil && held.Incarnation >= node.Incarnation {
				_ = store.Revoke(ctx, lease)
				return nil, fmt.Errorf("%w: node %d incarnation %d is registered (this is %d)", ErrFenced, node.ID, held.Incarnation, node.Incarnation)
			}
			cmp = meta.Compare{Key: key, Revision: kv.Revision} // replace that older one only
		}
		if _, err := store.Txn(ctx, []meta.Compare{cmp}, []meta.Op{{Key: key, Value: body, Lease: lease}}); err == nil {
			break
		} else if !errors.Is(err, meta.ErrConflict) {
			_ = store.Revoke(ctx, lease)
			return nil, fmt.Errorf("cluster: register node %d: %w", node.ID, err)
		}
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Membership{store: store, node: node, lease: lease, clusterID: id, log: opts.Logger.With("node", node.ID),
		cancel: cancel, done: make(chan struct{}), lost: make(chan struct{})}
	watch := store.Watch(bctx, key) // from now: a replacement after this is seen
	go m.keepAlive(bctx, opts.TTL, watch)
	return m, nil
}

// clusterID reads the cluster's identity, creating it from proposed when
// the store has none.
func clusterID(ctx context.Context, store meta.Store, proposed model.ClusterID) (model.ClusterID, error) {
	for {
		kv, err := store.Get(ctx, keyClusterID)
		if err == nil {
			return model.ClusterID(kv.Value), nil
		}
		if !errors.Is(err, meta.ErrNotFound) {
			return "", fmt.Errorf("cluster: read the cluster id: %w", err)
		}
		if proposed == "" {
			return "", errors.New("cluster: no cluster id stored and none proposed")
		}
		_, err = store.Txn(ctx, []meta.Compare{{Key: keyClusterID}}, []meta.Op{{Key: keyClusterID, Value: []byte(proposed)}})
		if err != nil && !errors.Is(err, meta.ErrConflict) {
			return "", fmt.Errorf("cluster: create the cluster id: %w", err)
		}
	}
}

// keepAlive renews the lease every third of its TTL and watches the node's
// key (and reads it at every renewal); the membership is lost when the
// lease ends or another incarnation takes the key.
func (m *Membership) keepAlive(ctx context.Context, ttl time.Duration, watch <-chan meta.Event) {
	defer close(m.done)
	key := NodeKey(m.node.ID)
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-watch:
			if !ok {
				if ctx.Err() != nil {
					return
				}
				watch = m.store.Watch(ctx, key) // closed (slow or leaderless): look again below
			} else if ev.Key != key {
				continue
			}
			if !m.holds(ctx) {
				return
			}
		case <-t.C:
			kctx, cancel := context.WithTimeout(ctx, ttl)
			err := m.store.KeepAlive(kctx, m.lease)
			cancel()
			if errors.Is(err, meta.ErrNoLease) {
				m.fail(fmt.Errorf("cluster: node %d's lease expired: %w", m.node.ID, err))
				return
			}
			if err != nil && ctx.Err() == nil {
				m.log.Warn("cluster lease keep-alive failed; retrying", "err", err)
			}
			if !m.holds(ctx) {
				return
			}
		}
	}
}

// holds checks the node's key is still this registration's; when it is not,
// the membership is lost.
func (m *Membership) holds(ctx context.Context) bool {
	kv, err := m.store.Get(ctx, NodeKey(m.node.ID))
	if errors.Is(err, meta.ErrNotFound) || err == nil && kv.Lease != m.lease {
		m.fail(fmt.Errorf("%w: node %d's registration was replaced or removed", ErrFenced, m.node.ID))
		return false
	}
	return true
}

func (m *Membership) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
		close(m.lost)
	}
	m.mu.Unlock()
	m.log.Error("cluster membership lost", "err", err)
}

// ClusterID is the cluster's identity as the store holds it.
func (m *Membership) ClusterID() model.ClusterID { return m.clusterID }

// Lease is the registration's lease: keys a node owns only while it is
// live (an election's key) go under it.
func (m *Membership) Lease() meta.LeaseID { return m.lease }

// Lost is closed when the registration is lost; Err says why.
func (m *Membership) Lost() <-chan struct{} { return m.lost }

// Err is why the membership was lost (nil while it holds).
func (m *Membership) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Leave ends the registration now (the node's key goes with its lease).
func (m *Membership) Leave(ctx context.Context) error {
	m.cancel()
	<-m.done
	if err := m.store.Revoke(ctx, m.lease); err != nil && !errors.Is(err, meta.ErrNoLease) {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	return nil
}

// Nodes lists the live nodes, by id.
func Nodes(ctx context.Context, store meta.Store) ([]Node, error) {
	kvs, err := store.List(ctx, prefixNodes)
	if err != nil {
		return nil, fmt.Errorf("cluster: list nodes: %w", err)
	}
	out := make([]Node, 0, len(kvs))
	for _, kv := range kvs {
		var n Node
		if err := json.Unmarshal(kv.Value, &n); err != nil {
			continue // not a node record
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
