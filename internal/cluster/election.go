package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/rosettamq/rosetta/internal/meta"
)

// ErrNotLeader is a fenced write by a leader whose term ended (its
// election key is gone or belongs to another).
var ErrNotLeader = errors.New("cluster: no longer the leader")

// Leadership is a won election: the key holds the winner's value under its
// lease, and Token (the key's create revision) fences the winner's writes —
// a deposed leader's late writes fail however late they arrive.
type Leadership struct {
	store meta.Store
	key   string
	Token int64
}

// Campaign waits until this candidate holds key (with value, under lease,
// so that it is released when the candidate's node dies) and returns the
// leadership, or returns when ctx ends.
func Campaign(ctx context.Context, store meta.Store, key string, value []byte, lease meta.LeaseID) (*Leadership, error) {
	for {
		// Watch before trying, so a release between the try and the wait
		// is not missed.
		wctx, cancel := context.WithCancel(ctx)
		watch := store.Watch(wctx, key)
		rev, err := store.Txn(ctx, []meta.Compare{{Key: key, Target: meta.CompareCreate}}, []meta.Op{{Key: key, Value: value, Lease: lease}})
		if err == nil {
			cancel()
			return &Leadership{store: store, key: key, Token: rev}, nil
		}
		if !errors.Is(err, meta.ErrConflict) {
			cancel()
			return nil, fmt.Errorf("cluster: campaign for %s: %w", key, err)
		}
		err = waitReleased(ctx, watch, key)
		cancel()
		if err != nil {
			return nil, err
		}
	}
}

// waitReleased returns once key is deleted (or the watch ends: the caller
// tries again), or ctx ends.
func waitReleased(ctx context.Context, watch <-chan meta.Event, key string) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-watch:
			if !ok || ev.Compacted || ev.Key == key && ev.Deleted {
				return nil
			}
		}
	}
}

// Leader returns the value of key's holder, or meta.ErrNotFound.
func Leader(ctx context.Context, store meta.Store, key string) (meta.KV, error) {
	return store.Get(ctx, key)
}

// Txn applies ops if this leadership still holds (and cmps hold).
func (l *Leadership) Txn(ctx context.Context, cmps []meta.Compare, ops []meta.Op) (int64, error) {
	fence := meta.Compare{Key: l.key, Target: meta.CompareCreate, Revision: l.Token}
	rev, err := l.store.Txn(ctx, append([]meta.Compare{fence}, cmps...), ops)
	if errors.Is(err, meta.ErrConflict) {
		if kv, gerr := l.store.Get(ctx, l.key); errors.Is(gerr, meta.ErrNotFound) || gerr == nil && kv.CreateRevision != l.Token {
			return 0, fmt.Errorf("%w (%s)", ErrNotLeader, l.key)
		}
	}
	return rev, err
}

// Resign gives the leadership up (only if it still holds it).
func (l *Leadership) Resign(ctx context.Context) error {
	_, err := l.store.Txn(ctx, []meta.Compare{{Key: l.key, Target: meta.CompareCreate, Revision: l.Token}}, []meta.Op{{Key: l.key, Delete: true}})
	if errors.Is(err, meta.ErrConflict) {
		return nil // already gone
	}
	return err
}
