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

// BoltStore is the embedded Store on a bbolt file.
type BoltStore struct {
	db *bolt.DB

	mu       sync.Mutex
	rev      int64
	watchers map[*watcher]struct{}
}

type watcher struct {
	prefix string
	ch     chan Event
}

// OpenBolt opens or creates the store file at path.
func OpenBolt(path string) (*BoltStore, error) {
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open metadata store: %w", err)
	}
	s := &BoltStore{db: db, watchers: map[*watcher]struct{}{}}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketKV); err != nil {
			return err
		}
		info, err := tx.CreateBucketIfNotExists(bucketInfo)
		if err != nil {
			return err
		}
		if v := info.Get(keyRev); len(v) == 8 {
			s.rev = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init metadata store: %w", err)
	}
	return s, nil
}

// value layout: revision u64 big endian | value
func decodeValue(key string, v []byte) (KV, error) {
	if len(v) < 8 {
		return KV{}, fmt.Errorf("meta: corrupt value for %q", key)
	}
	return KV{Key: key, Revision: int64(binary.BigEndian.Uint64(v)), Value: append([]byte(nil), v[8:]...)}, nil
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
func (s *BoltStore) List(_ context.Context, prefix string) ([]KV, error) {
	var out []KV
	err := s.db.View(func(tx *bolt.Tx) error {
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
	return out, err
}

// Txn implements Store.
func (s *BoltStore) Txn(_ context.Context, cmps []Compare, ops []Op) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
				have = kv.Revision
			}
			if have != c.Revision {
				return fmt.Errorf("%w: %q at revision %d, expected %d", ErrConflict, c.Key, have, c.Revision)
			}
		}
		for _, op := range ops {
			if op.Delete {
				if b.Get([]byte(op.Key)) == nil {
					continue
				}
				if err := b.Delete([]byte(op.Key)); err != nil {
					return err
				}
				events = append(events, Event{KV: KV{Key: op.Key, Revision: rev}, Deleted: true})
				continue
			}
			v := make([]byte, 8+len(op.Value))
			binary.BigEndian.PutUint64(v, uint64(rev))
			copy(v[8:], op.Value)
			if err := b.Put([]byte(op.Key), v); err != nil {
				return err
			}
			events = append(events, Event{KV: KV{Key: op.Key, Value: op.Value, Revision: rev}})
		}
		var r [8]byte
		binary.BigEndian.PutUint64(r[:], uint64(rev))
		return tx.Bucket(bucketInfo).Put(keyRev, r[:])
	})
	if err != nil {
		return 0, err
	}
	s.rev = rev
	for w := range s.watchers {
		for _, ev := range events {
			if !strings.HasPrefix(ev.Key, w.prefix) {
				continue
			}
			select {
			case w.ch <- ev:
			default:
				close(w.ch) // too slow: the watcher must re-list
				delete(s.watchers, w)
			}
			if _, ok := s.watchers[w]; !ok {
				break
			}
		}
	}
	return rev, nil
}

// Watch implements Store.
func (s *BoltStore) Watch(ctx context.Context, prefix string) <-chan Event {
	w := &watcher{prefix: prefix, ch: make(chan Event, 256)}
	s.mu.Lock()
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
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

// Revision implements Store.
func (s *BoltStore) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Close implements Store.
func (s *BoltStore) Close() error {
	s.mu.Lock()
	for w := range s.watchers {
		close(w.ch)
		delete(s.watchers, w)
	}
	s.mu.Unlock()
	return s.db.Close()
}
