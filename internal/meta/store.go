// Package meta is Rosetta's metadata store: topics, queue ids, groups, users
// and ACLs live behind the Store interface, an etcd-shaped key/value API with
// revisions, compare-and-swap transactions and watches. The single-node
// implementation is embedded (bbolt, one file in the data directory); cluster
// mode swaps in etcd without touching callers.
package meta

import (
	"context"
	"errors"
)

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("meta: key not found")

// ErrConflict is returned by Txn when a comparison fails.
var ErrConflict = errors.New("meta: transaction conflict")

// KV is one stored key with the revision of its last change.
type KV struct {
	Key      string
	Value    []byte
	Revision int64
}

// Op is one write in a transaction.
type Op struct {
	Key    string
	Value  []byte
	Delete bool
}

// Compare requires a key's revision to equal Revision (0: the key must not
// exist) for a transaction to apply.
type Compare struct {
	Key      string
	Revision int64
}

// Event is one change seen by a watcher.
type Event struct {
	KV
	Deleted bool
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
	// Watch delivers the changes under prefix made after it was called until
	// ctx ends. A slow watcher's channel is closed; it must re-list.
	Watch(ctx context.Context, prefix string) <-chan Event
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
