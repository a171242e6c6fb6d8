package meta

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// EtcdStore is the Store on etcd v3: every key lives under a prefix (one
// cluster's namespace), revisions, compares, watches and leases are etcd's
// own.
type EtcdStore struct {
	cli     *clientv3.Client
	kv      clientv3.KV
	watcher clientv3.Watcher
	lease   clientv3.Lease
	rev     atomic.Int64 // the newest revision any answer carried

	mu      sync.Mutex // guards closed and watches
	closed  bool
	watches map[*etcdWatch]struct{}
}

type etcdWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// EtcdConfig says how to reach etcd.
type EtcdConfig struct {
	Endpoints   []string
	Prefix      string // every key is stored under it, e.g. "/rosetta/"
	DialTimeout time.Duration
	TLS         *tls.Config // nil: plain connections
	Logger      *slog.Logger
}

// OpenEtcd connects to etcd and checks it answers.
func OpenEtcd(ctx context.Context, c EtcdConfig) (*EtcdStore, error) {
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: c.DialTimeout, Context: context.WithoutCancel(ctx), TLS: c.TLS,
		AutoSyncInterval: time.Minute,
		Logger:           ZapLogger(c.Logger.With("component", "etcd-client"))})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	s := &EtcdStore{cli: cli, kv: namespace.NewKV(cli.KV, c.Prefix), watcher: namespace.NewWatcher(cli.Watcher, c.Prefix),
		lease: namespace.NewLease(cli.Lease, c.Prefix), watches: map[*etcdWatch]struct{}{}}
	pctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	resp, err := s.kv.Get(pctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %v: %w", c.Endpoints, err)
	}
	s.seen(resp.Header.Revision)
	return s, nil
}

// Client is the underlying etcd client (elections, member lists).
func (s *EtcdStore) Client() *clientv3.Client { return s.cli }

func (s *EtcdStore) seen(rev int64) {
	for {
		old := s.rev.Load()
		if rev <= old || s.rev.CompareAndSwap(old, rev) {
			return
		}
	}
}

func fromEtcd(kv *mvccpb.KeyValue) KV {
	return KV{Key: string(kv.Key), Value: kv.Value, Revision: kv.ModRevision, CreateRevision: kv.CreateRevision,
		Version: kv.Version, Lease: LeaseID(kv.Lease)}
}

// readOpts are the options of a read under ctx: serializable (answered by
// the member asked, no leader needed) under LocalReads.
func readOpts(ctx context.Context, opts ...clientv3.OpOption) []clientv3.OpOption {
	if localReads(ctx) {
		opts = append(opts, clientv3.WithSerializable())
	}
	return opts
}

// Get implements Store.
func (s *EtcdStore) Get(ctx context.Context, key string) (KV, error) {
	resp, err := s.kv.Get(ctx, key, readOpts(ctx)...)
	if err != nil {
		return KV{}, fmt.Errorf("meta get %q: %w", key, err)
	}
	s.seen(resp.Header.Revision)
	if len(resp.Kvs) == 0 {
		return KV{}, ErrNotFound
	}
	return fromEtcd(resp.Kvs[0]), nil
}

// List implements Store.
func (s *EtcdStore) List(ctx context.Context, prefix string) ([]KV, error) {
	kvs, _, err := s.ListRev(ctx, prefix)
	return kvs, err
}

// ListRev implements Store.
func (s *EtcdStore) ListRev(ctx context.Context, prefix string) ([]KV, int64, error) {
	opts := []clientv3.OpOption{clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if prefix == "" {
		opts = append(opts, clientv3.WithFromKey())
		prefix = "\x00"
	} else {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := s.kv.Get(ctx, prefix, readOpts(ctx, opts...)...)
	if err != nil {
		return nil, 0, fmt.Errorf("meta list %q: %w", prefix, err)
	}
	s.seen(resp.Header.Revision)
	out := make([]KV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = fromEtcd(kv)
	}
	return out, resp.Header.Revision, nil
}

// Txn implements Store.
func (s *EtcdStore) Txn(ctx context.Context, cmps []Compare, ops []Op) (int64, error) {
	conds := make([]clientv3.Cmp, len(cmps))
	for i, c := range cmps {
		switch c.Target {
		case CompareCreate:
			conds[i] = clientv3.Compare(clientv3.CreateRevision(c.Key), "=", c.Revision)
		case CompareVersion:
			conds[i] = clientv3.Compare(clientv3.Version(c.Key), "=", c.Revision)
		default:
			conds[i] = clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Revision)
		}
	}
	writes := make([]clientv3.Op, len(ops))
	for i, op := range ops {
		switch {
		case op.Delete:
			writes[i] = clientv3.OpDelete(op.Key)
		case op.Lease != 0:
			writes[i] = clientv3.OpPut(op.Key, string(op.Value), clientv3.WithLease(clientv3.LeaseID(op.Lease)))
		default:
			writes[i] = clientv3.OpPut(op.Key, string(op.Value))
		}
	}
	resp, err := s.kv.Txn(ctx).If(conds...).Then(writes...).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, fmt.Errorf("%w: %v", ErrNoLease, err)
		}
		return 0, fmt.Errorf("meta txn: %w", err)
	}
	s.seen(resp.Header.Revision)
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: a comparison failed", ErrConflict)
	}
	return resp.Header.Revision, nil
}

// Watch implements Store.
func (s *EtcdStore) Watch(ctx context.Context, prefix string) <-chan Event {
	return s.watch(ctx, prefix, 0)
}

// WatchFrom implements Store.
func (s *EtcdStore) WatchFrom(ctx context.Context, prefix string, rev int64) <-chan Event {
	return s.watch(ctx, prefix, rev+1)
}

// watch forwards etcd's watch of prefix (from revision from, or from now
// when 0) to a buffered channel, closed when ctx ends, the store closes,
// the watcher falls behind or etcd ends the watch.
func (s *EtcdStore) watch(ctx context.Context, prefix string, from int64) <-chan Event {
	out := make(chan Event, 256)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(out)
		return out
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &etcdWatch{cancel: cancel, done: make(chan struct{})}
	s.watches[w] = struct{}{}
	s.mu.Unlock()
	opts := []clientv3.OpOption{clientv3.WithPrevKV()}
	key := prefix
	if prefix == "" {
		opts = append(opts, clientv3.WithFromKey())
		key = "\x00"
	} else {
		opts = append(opts, clientv3.WithPrefix())
	}
	if from > 0 {
		opts = append(opts, clientv3.WithRev(from))
	}
	ch := s.watcher.Watch(wctx, key, opts...)
	go func() {
		defer func() {
			cancel()
			close(out)
			s.mu.Lock()
			delete(s.watches, w)
			s.mu.Unlock()
			close(w.done)
		}()
		for resp := range ch {
			if resp.CompactRevision != 0 {
				out <- Event{KV: KV{Revision: resp.CompactRevision}, Compacted: true}
				return
			}
			if resp.Err() != nil {
				return
			}
			s.seen(resp.Header.Revision)
			for _, ev := range resp.Events {
				e := Event{KV: fromEtcd(ev.Kv)}
				if ev.Type == clientv3.EventTypeDelete {
					e.Deleted = true
					if ev.PrevKv != nil {
						e.Lease = LeaseID(ev.PrevKv.Lease)
					}
				}
				select {
				case out <- e:
				default:
					return // too slow: the watcher re-lists
				}
			}
		}
	}()
	return out
}

// Grant implements Store. etcd counts TTLs in whole seconds (and raises
// short ones to its minimum).
func (s *EtcdStore) Grant(ctx context.Context, ttl time.Duration) (LeaseID, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("meta: lease ttl %v", ttl)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	resp, err := s.lease.Grant(ctx, secs)
	if err != nil {
		return 0, fmt.Errorf("meta grant: %w", err)
	}
	s.seen(resp.ResponseHeader.Revision)
	return LeaseID(resp.ID), nil
}

// KeepAlive implements Store.
func (s *EtcdStore) KeepAlive(ctx context.Context, id LeaseID) error {
	if _, err := s.lease.KeepAliveOnce(ctx, clientv3.LeaseID(id)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: %d", ErrNoLease, id)
		}
		return fmt.Errorf("meta keep-alive: %w", err)
	}
	return nil
}

// Revoke implements Store.
func (s *EtcdStore) Revoke(ctx context.Context, id LeaseID) error {
	resp, err := s.lease.Revoke(ctx, clientv3.LeaseID(id))
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: %d", ErrNoLease, id)
		}
		return fmt.Errorf("meta revoke: %w", err)
	}
	s.seen(resp.Header.Revision)
	return nil
}

// Revision implements Store: the newest revision seen, refreshed from etcd
// when it answers within a second.
func (s *EtcdStore) Revision() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if resp, err := s.kv.Get(ctx, "\x00", clientv3.WithCountOnly()); err == nil {
		s.seen(resp.Header.Revision)
	}
	return s.rev.Load()
}

// Compact drops the history at or below rev (watches from before it get a
// Compacted event).
func (s *EtcdStore) Compact(ctx context.Context, rev int64) error {
	if _, err := s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("meta compact: %w", err)
	}
	return nil
}

// Close implements Store: it ends the watches and the connection.
func (s *EtcdStore) Close() error {
	s.mu.Lock()
	s.closed = true
	watches := make([]*etcdWatch, 0, len(s.watches))
	for w := range s.watches {
		watches = append(watches, w)
	}
	s.mu.Unlock()
	for _, w := range watches {
		w.cancel()
		<-w.done
	}
	return s.cli.Close()
}
