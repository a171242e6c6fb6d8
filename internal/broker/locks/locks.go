// Package locks holds the queue locks of ordered consumption: a consumer
// group member that locks a queue is the only one of its group consuming
// it, so messages of that queue are processed one at a time and in order,
// even while the group rebalances. Locks are leases (RocketMQ's 60 s,
// renewed by the client every 20 s); an expired lock can be taken by
// another member. State is in memory: after a restart clients lock again.
package locks

import (
	"sync"
	"time"
)

// Queue names one queue of a topic.
type Queue struct {
	Topic string
	Index int32
}

type key struct {
	group string
	queue Queue
}

type holder struct {
	client  string
	expires time.Time
}

// Manager holds every lock.
type Manager struct {
	lease time.Duration
	now   func() time.Time

	mu    sync.Mutex
	locks map[key]holder
}

// New returns a manager whose locks last lease unless renewed.
func New(lease time.Duration, now func() time.Time) *Manager {
	if now == nil {
		now = time.Now
	}
	return &Manager{lease: lease, now: now, locks: map[key]holder{}}
}

// TryLock locks (or renews) the queues for client in group and returns the
// ones it now holds; queues held by another live client are left out.
func (m *Manager) TryLock(group, client string, queues []Queue) []Queue {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var got []Queue
	for _, q := range queues {
		k := key{group, q}
		if h, ok := m.locks[k]; ok && h.client != client && now.Before(h.expires) {
			continue
		}
		m.locks[k] = holder{client: client, expires: now.Add(m.lease)}
		got = append(got, q)
	}
	return got
}

// Unlock releases the queues client holds in group.
func (m *Manager) Unlock(group, client string, queues []Queue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, q := range queues {
		k := key{group, q}
		if h, ok := m.locks[k]; ok && h.client == client {
			delete(m.locks, k)
		}
	}
}

// ReleaseClient drops every lock a client holds (it disconnected).
func (m *Manager) ReleaseClient(client string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, h := range m.locks {
		if h.client == client {
			delete(m.locks, k)
		}
	}
}
