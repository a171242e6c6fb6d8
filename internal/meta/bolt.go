package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketKV   = []byte("kv")
	bucketInfo = []byte("info")
	keyRev     = []byte("revision")
)

// maxHistory is how many recent events WatchFrom can replay.
const maxHistory = 8192

// BoltStore is the embedded Store on a bbolt file. Leases live in memory:
// they end with the process, and keys left attached to one are deleted when
// the store opens again (a node's registration does not outlive it).
type BoltStore struct {
	db *bolt.DB

	mu        sync.Mutex
	rev       int64
	watchers  map[*watcher]struct{}
	history   []Event // the newest changes, oldest first
	compacted int64   // changes at or below this revision are not in history
	leases    map[LeaseID]*lease
	nextLease LeaseID
	now       func() time.Time

	stop chan struct{}
	done chan struct{}
}

type watcher struct {
	prefix string
	ch     chan Event
}

type lease struct {
	ttl      time.Duration
	deadline time.Time
	keys     map[string]bool
}

// OpenBolt opens or creates the store file at path.
func OpenBolt(path string) (*BoltStore, error) {
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open metadata store: %w", err)
	}
	s := &BoltStore{db: db, watchers: map[*watcher]struct{}{}, leases: map[LeaseID]*lease{}, now: time.Now,
		stop: make(chan struct{}), done: make(chan struct{})}
	var leased []string
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketKV)
		if err != nil {
			return err
		}
		info, err := tx.CreateBucketIfNotExists(bucketInfo)
		if err != nil {
			return err
		}
		if v := info.Get(keyRev); len(v) == 8 {
			s.rev = int64(binary.BigEndian.Uint64(v))
		}
		return b.ForEach(func(k, v []byte) error {
			if kv, err := decodeValue(string(k), v); err == nil && kv.Lease != 0 {
				leased = append(leased, kv.Key)
			}
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init metadata store: %w", err)
	}
	s.compacted = s.rev
	if len(leased) > 0 {
		ops := make([]Op, len(leased))
		for i, k := range leased {
			ops[i] = Op{Key: k, Delete: true}
		}
		if _, err := s.Txn(context.Background(), nil, ops); err != nil {
			db.Close()
			return nil, fmt.Errorf("drop keys of ended leases: %w", err)
		}
	}
	go s.expireLoop()
	return s, nil
}

// Value layouts: written now, marker 0xfe | mod u64 | create u64 | version
// u64 | lease u64 | value (big endian); written by older versions, mod u64
// | value (their first byte is 0: revisions stay far below 2^56).
const (
	valueMarker = 0xfe
	valueHeader = 1 + 4*8
)

func encodeValue(kv KV) []byte {
	v := make([]byte, valueHeader+len(kv.Value))
	be := binary.BigEndian
	v[0] = valueMarker
	be.PutUint64(v[1:], uint64(kv.Revision))
	be.PutUint64(v[9:], uint64(kv.CreateRevision))
	be.PutUint64(v[17:], uint64(kv.Version))
	be.PutUint64(v[25:], uint64(kv.Lease))
	copy(v[valueHeader:], kv.Value)
	return v
}

func decodeValue(key string, v []byte) (KV, error) {
	be := binary.BigEndian
	if len(v) >= valueHeader && v[0] == valueMarker {
		return KV{Key: key, Revision: int64(be.Uint64(v[1:])), CreateRevision: int64(be.Uint64(v[9:])),
			Version: int64(be.Uint64(v[17:])), Lease: LeaseID(be.Uint64(v[25:])), Value: append([]byte(nil), v[valueHeader:]...)}, nil
	}
	if len(v) < 8 {
		return KV{}, fmt.Errorf("meta: corrupt value for %q", key)
	}
	rev := int64(be.Uint64(v))
	return KV{Key: key, Revision: rev, CreateRevision: rev, Version: 1, Value: append([]byte(nil), v[8:]...)}, nil
}

// Get implements Store.
func (s *BoltStore) Get(_ context.Context, key string) (KV, error) {
	var kv KV
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKV).Get([]byte(key))
		if v == nil {
			return ErrNotFound
		}
		var err error
		kv, err = decodeValue(key, v)
		return err
	})
	return kv, err
}

// List implements Store.
func (s *BoltStore) List(ctx context.Context, prefix string) ([]KV, error) {
	kvs, _, err := s.ListRev(ctx, prefix)
	return kvs, err
}

// ListRev implements Store.
func (s *BoltStore) ListRev(_ context.Context, prefix string) ([]KV, int64, error) {
	var out []KV
	var rev int64
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketInfo).Get(keyRev); len(v) == 8 {
			rev = int64(binary.BigEndian.Uint64(v))
		}
		c := tx.Bucket(bucketKV).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			kv, err := decodeValue(string(k), v)
			if err != nil {
				return err
			}
			out = append(out, kv)
		}
		return nil
	})
	return out, rev, err
}

// Txn implements Store.
func (s *BoltStore) Txn(_ context.Context, cmps []Compare, ops []Op) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		if op.Lease != 0 && !op.Delete && s.leases[op.Lease] == nil {
			return 0, fmt.Errorf("%w: %d (key %q)", ErrNoLease, op.Lease, op.Key)
		}
	}
	rev := s.rev + 1
	var events []Event
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKV)
		for _, c := range cmps {
			var have int64
			if v := b.Get([]byte(c.Key)); v != nil {
				kv, err := decodeValue(c.Key, v)
				if err != nil {
					return err
				}
				switch c.Target {
				case CompareCreate:
					have = kv.CreateRevision
				case CompareVersion:
					have = kv.Version
				default:
					have = kv.Revision
				}
			}
			if have != c.Revision {
				return fmt.Errorf("%w: %q at %d, expected %d", ErrConflict, c.Key, have, c.Revision)
			}
		}
		for _, op := range ops {
			var old *KV
			if v := b.Get([]byte(op.Key)); v != nil {
				kv, err := decodeValue(op.Key, v)
				if err != nil {
					return err
				}
				old = &kv
			}
			if op.Delete {
				if old == nil {
					continue
				}
				if err := b.Delete([]byte(op.Key)); err != nil {
					return err
				}
				events = append(events, Event{KV: KV{Key: op.Key, Revision: rev, Lease: old.Lease}, Deleted: true})
				continue
			}
			kv := KV{Key: op.Key, Value: op.Value, Revision: rev, CreateRevision: rev, Version: 1, Lease: op.Lease}
			if old != nil {
				kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
			}
			if err := b.Put([]byte(op.Key), encodeValue(kv)); err != nil {
				return err
			}
			events = append(events, Event{KV: kv})
		}
		var r [8]byte
		binary.BigEndian.PutUint64(r[:], uint64(rev))
		return tx.Bucket(bucketInfo).Put(keyRev, r[:])
	})
	if err != nil {
		return 0, err
	}
	s.rev = rev
	for _, ev := range events {
		s.trackLeaseLocked(ev)
	}
	s.history = append(s.history, events...)
	if over := len(s.history) - maxHistory; over > 0 {
		s.compacted = s.history[over-1].Revision
		s.history = append(s.history[:0], s.history[over:]...)
	}
	for w := range s.watchers {
		s.sendLocked(w, events)
	}
	return rev, nil
}

// trackLeaseLocked keeps each lease's key set in step with a change.
func (s *BoltStore) trackLeaseLocked(ev Event) {
	for _, l := range s.leases {
		delete(l.keys, ev.Key)
	}
	if l := s.leases[ev.Lease]; l != nil && !ev.Deleted {
		l.keys[ev.Key] = true
	}
}

// sendLocked delivers events under w's prefix; a watcher too slow to take
// them is closed (it must re-list).
func (s *BoltStore) sendLocked(w *watcher, events []Event) {
	for _, ev := range events {
		if !strings.HasPrefix(ev.Key, w.prefix) {
			continue
		}
		select {
		case w.ch <- ev:
		default:
			close(w.ch)
			delete(s.watchers, w)
			return
		}
	}
}

// Watch implements Store.
func (s *BoltStore) Watch(ctx context.Context, prefix string) <-chan Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchLocked(ctx, prefix, nil)
}

// WatchFrom implements Store.
func (s *BoltStore) WatchFrom(ctx context.Context, prefix string, rev int64) <-chan Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev < s.compacted {
		ch := make(chan Event, 1)
		ch <- Event{KV: KV{Revision: s.compacted}, Compacted: true}
		close(ch)
		return ch
	}
	var past []Event
	for _, ev := range s.history {
		if ev.Revision > rev && strings.HasPrefix(ev.Key, prefix) {
			past = append(past, ev)
		}
	}
	return s.watchLocked(ctx, prefix, past)
}

func (s *BoltStore) watchLocked(ctx context.Context, prefix string, past []Event) <-chan Event {
	w := &watcher{prefix: prefix, ch: make(chan Event, 256+len(past))}
	for _, ev := range past {
		w.ch <- ev
	}
	s.watchers[w] = struct{}{}
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.watchers[w]; ok {
			delete(s.watchers, w)
			close(w.ch)
		}
	})
	return w.ch
}

// Grant implements Store.
func (s *BoltStore) Grant(_ context.Context, ttl time.Duration) (LeaseID, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("meta: lease ttl %v", ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextLease++
	s.leases[s.nextLease] = &lease{ttl: ttl, deadline: s.now().Add(ttl), keys: map[string]bool{}}
	return s.nextLease, nil
}

// KeepAlive implements Store.
func (s *BoltStore) KeepAlive(_ context.Context, id LeaseID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[id]
	if l == nil {
		return fmt.Errorf("%w: %d", ErrNoLease, id)
	}
	l.deadline = s.now().Add(l.ttl)
	return nil
}

// Revoke implements Store.
func (s *BoltStore) Revoke(ctx context.Context, id LeaseID) error {
	s.mu.Lock()
	l := s.leases[id]
	delete(s.leases, id)
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: %d", ErrNoLease, id)
	}
	return s.deleteKeys(ctx, l)
}

func (s *BoltStore) deleteKeys(ctx context.Context, l *lease) error {
	if len(l.keys) == 0 {
		return nil
	}
	ops := make([]Op, 0, len(l.keys))
	for k := range l.keys {
		ops = append(ops, Op{Key: k, Delete: true})
	}
	_, err := s.Txn(ctx, nil, ops)
	return err
}

// expireLeases ends the leases whose deadline passed by now.
func (s *BoltStore) expireLeases(now time.Time) {
	s.mu.Lock()
	var ended []*lease
	for id, l := range s.leases {
		if !now.Before(l.deadline) {
			ended = append(ended, l)
			delete(s.leases, id)
		}
	}
	s.mu.Unlock()
	for _, l := range ended {
		_ = s.deleteKeys(context.Background(), l)
	}
}

// expireLoop ends expired leases until Close.
func (s *BoltStore) expireLoop() {
	defer close(s.done)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.expireLeases(s.now())
		}
	}
}

// Revision implements Store.
func (s *BoltStore) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Close implements Store.
func (s *BoltStore) Close() error {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	for w := range s.watchers {
		close(w.ch)
		delete(s.watchers, w)
	}
	s.mu.Unlock()
	return s.db.Close()
}
