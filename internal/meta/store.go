// Package meta is Rosetta's metadata store: topics, queue ids, groups, users
// and ACLs live behind the Store interface, an etcd-shaped key/value API with
// revisions, compare-and-swap transactions and watches. The single-node
// implementation is embedded (bbolt, one file in the data directory); cluster
// mode swaps in etcd without touching callers.
package meta

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("meta: key not found")

// ErrConflict is returned by Txn when a comparison fails.
var ErrConflict = errors.New("meta: transaction conflict")

// ErrNoLease is an operation on a lease that expired or never existed.
var ErrNoLease = errors.New("meta: no such lease")

// LeaseID names a lease: keys attached to it are deleted when it expires
// or is revoked (etcd's leases; a node's registration under its lease).
type LeaseID int64

// KV is one stored key, with etcd's revisions: Revision (the mod revision)
// of its last change, CreateRevision of its creation (stays across updates;
// a compare on it fences, as an election's key does), Version counting its
// changes since creation, and the lease it is attached to (0: none).
type KV struct {
	Key            string
	Value          []byte
	Revision       int64
	CreateRevision int64
	Version        int64
	Lease          LeaseID
}

// Op is one write in a transaction. Lease attaches the key to a lease.
type Op struct {
	Key    string
	Value  []byte
	Delete bool
	Lease  LeaseID
}

// CompareTarget is what a Compare looks at.
type CompareTarget int

// Compare targets.
const (
	CompareMod     CompareTarget = iota // the mod revision (0: the key must not exist)
	CompareCreate                       // the create revision (0: the key must not exist)
	CompareVersion                      // the version (0: the key must not exist)
)

// Compare requires a key's Target to equal Revision for a transaction to
// apply.
type Compare struct {
	Key      string
	Revision int64
	Target   CompareTarget
}

// Event is one change seen by a watcher. Compacted (the last event of a
// channel) says the changes asked for are no longer kept: re-list.
type Event struct {
	KV
	Deleted   bool
	Compacted bool
}

// Store is the metadata store.
type Store interface {
	// Get returns a key or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// List returns every key with the prefix, in key order.
	List(ctx context.Context, prefix string) ([]KV, error)
	// Txn applies ops atomically if every comparison holds, and returns the
	// new revision; it returns ErrConflict otherwise.
	Txn(ctx context.Context, cmps []Compare, ops []Op) (int64, error)
	// ListRev is List with the revision the listing reflects, for a
	// following WatchFrom.
	ListRev(ctx context.Context, prefix string) ([]KV, int64, error)
	// Watch delivers the changes under prefix made after it was called until
	// ctx ends. A slow watcher's channel is closed; it must re-list.
	Watch(ctx context.Context, prefix string) <-chan Event
	// WatchFrom delivers the changes under prefix with revisions above rev
	// (those already made first), until ctx ends; when they are no longer
	// kept it delivers one Compacted event and closes.
	WatchFrom(ctx context.Context, prefix string, rev int64) <-chan Event
	// Grant creates a lease that expires ttl after its last keep-alive.
	Grant(ctx context.Context, ttl time.Duration) (LeaseID, error)
	// KeepAlive renews a lease (ErrNoLease once it expired).
	KeepAlive(ctx context.Context, id LeaseID) error
	// Revoke ends a lease now, deleting its keys.
	Revoke(ctx context.Context, id LeaseID) error
	// Revision is the store's current revision.
	Revision() int64
	Close() error
}

// Put writes one key unconditionally.
func Put(ctx context.Context, s Store, key string, value []byte) error {
	_, err := s.Txn(ctx, nil, []Op{{Key: key, Value: value}})
	return err
}

// Delete removes one key unconditionally.
func Delete(ctx context.Context, s Store, key string) error {
	_, err := s.Txn(ctx, nil, []Op{{Key: key, Delete: true}})
	return err
}

// localReadsKey marks a context whose reads may be answered locally.
type localReadsKey struct{}

// LocalReads returns a context under which the store's reads may be
// answered by the member asked without its leader (etcd's serializable
// reads): possibly a moment behind the cluster, but answered while the
// store elects a leader. For loads followed by a watch from the revision
// they read at, such as a new group leader building its broker, which
// would otherwise wait out an etcd election when the member that died was
// etcd's leader too. Writes are unaffected.
func LocalReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, localReadsKey{}, true)
}

func localReads(ctx context.Context) bool {
	v, _ := ctx.Value(localReadsKey{}).(bool)
	return v
}
