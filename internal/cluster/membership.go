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
	// Role is RoleProtocol for a protocol-only node ("" for a member).
	Role string `json:"role,omitempty"`
	// Host is a protocol-only node's host: the address its connections
	// to the members come from.
	Host string `json:"host,omitempty"`
}

// RoleProtocol is the role of a protocol-only node: it serves clients
// and holds no data (no replica, no etcd member).
const RoleProtocol = "protocol"

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
// kept alive until Leave, or until a newer incarnation of the node takes it
// (Lost is closed; Err says why). A lease the store lets end — an expiry
// while its metadata leader changes, a long pause — is replaced: the node
// registers again under a new one.
type Membership struct {
	store     meta.Store
	node      Node
	body      []byte // the registration's value
	ttl       time.Duration
	clusterID model.ClusterID
	log       *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	lost   chan struct{}
	mu     sync.Mutex
	lease  meta.LeaseID
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
	if err := register(ctx, store, node, body, lease); err != nil {
		_ = store.Revoke(ctx, lease)
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Membership{store: store, node: node, body: body, ttl: opts.TTL, lease: lease, clusterID: id,
		log: opts.Logger.With("node", node.ID), cancel: cancel, done: make(chan struct{}), lost: make(chan struct{})}
	watch := store.Watch(bctx, NodeKey(node.ID)) // from now: a replacement after this is seen
	go m.keepAlive(bctx, watch)
	return m, nil
}

// register writes the node's key under lease unless the same or a newer
// incarnation of the node holds it (ErrFenced); an older one is replaced.
func register(ctx context.Context, store meta.Store, node Node, body []byte, lease meta.LeaseID) error {
	key := NodeKey(node.ID)
	for {
		var cmp meta.Compare
		switch kv, err := store.Get(ctx, key); {
		case errors.Is(err, meta.ErrNotFound):
			cmp = meta.Compare{Key: key} // still absent
		case err != nil:
			return fmt.Errorf("cluster: read %s: %w", key, err)
		default:
			var held Node
			if json.Unmarshal(kv.Value, &held) == nil && held.Incarnation >= node.Incarnation {
				return fmt.Errorf("%w: node %d incarnation %d is registered (this is %d)", ErrFenced, node.ID, held.Incarnation, node.Incarnation)
			}
			cmp = meta.Compare{Key: key, Revision: kv.Revision} // replace that older one only
		}
		if _, err := store.Txn(ctx, []meta.Compare{cmp}, []meta.Op{{Key: key, Value: body, Lease: lease}}); err == nil {
			return nil
		} else if !errors.Is(err, meta.ErrConflict) {
			return fmt.Errorf("cluster: register node %d: %w", node.ID, err)
		}
	}
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
// key (and reads it at every renewal); the membership is lost when another
// incarnation takes the key. When the lease ended, the node registers again.
func (m *Membership) keepAlive(ctx context.Context, watch <-chan meta.Event) {
	defer close(m.done)
	key := NodeKey(m.node.ID)
	ttl := m.ttl
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
			err := m.store.KeepAlive(kctx, m.Lease())
			cancel()
			if errors.Is(err, meta.ErrNoLease) {
				if !m.registerAgain(ctx) {
					return
				}
				continue
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

// holds checks the node's key is still this registration's: when another
// holds it the membership is lost; when it is gone (its lease ended) the
// node registers again.
func (m *Membership) holds(ctx context.Context) bool {
	kv, err := m.store.Get(ctx, NodeKey(m.node.ID))
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return m.registerAgain(ctx)
	case err != nil || kv.Lease == m.Lease():
		return true // unknown (checked again at the next renewal), or ours
	}
	m.fail(fmt.Errorf("%w: node %d's registration was replaced", ErrFenced, m.node.ID))
	return false
}

// registerAgain registers the node under a new lease after its lease ended
// with its key: the store let it expire (while its own leader changed, say)
// though this node was alive. Only a newer incarnation holding the key
// fences the node; a store that cannot be reached is tried again at the
// next renewal.
func (m *Membership) registerAgain(ctx context.Context) bool {
	lease, err := m.store.Grant(ctx, m.ttl)
	if err == nil {
		if err = register(ctx, m.store, m.node, m.body, lease); err != nil {
			_ = m.store.Revoke(ctx, lease)
		}
	}
	switch {
	case errors.Is(err, ErrFenced):
		m.fail(err)
		return false
	case err != nil:
		if ctx.Err() == nil {
			m.log.Warn("the node's registration ended with its lease; registering again failed, retrying", "err", err)
		}
		return true
	}
	m.mu.Lock()
	old := m.lease
	m.lease = lease
	m.mu.Unlock()
	_ = m.store.Revoke(ctx, old) // gone already, or about to be
	m.log.Warn("the node's registration ended with its lease; registered again", "lease", int64(lease))
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
// live (an election's key) go under it. A new one replaces it when the
// store let it end.
func (m *Membership) Lease() meta.LeaseID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

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
	if err := m.store.Revoke(ctx, m.Lease()); err != nil && !errors.Is(err, meta.ErrNoLease) {
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
