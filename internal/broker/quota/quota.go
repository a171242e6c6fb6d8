// Package quota keeps tenants and namespaces within their limits on one
// node: produce and fetch bytes per second (token buckets; Kafka clients
// are told a throttle time and the connection waits it out, RocketMQ
// clients get SYSTEM_BUSY / TOO_MANY_REQUESTS while the bucket is in
// debt), stored bytes (writes refused past it) and topic count (creation
// refused). Limits live in the metadata store under quotas/; a topic is
// charged to its namespace and to its tenant, and the stricter wins.
package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// ErrExceeded is a write or creation refused by a storage or topic quota.
var ErrExceeded = errors.New("quota exceeded")

// Limits are one entity's quotas; zero means no limit.
type Limits struct {
	ProduceBytesPerSecond int64 `json:"produceBytesPerSecond,omitempty"`
	FetchBytesPerSecond   int64 `json:"fetchBytesPerSecond,omitempty"`
	StorageBytes          int64 `json:"storageBytes,omitempty"`
	Topics                int   `json:"topics,omitempty"`
	// Connections bounds the authenticated connections of a user, or of
	// the users bound to a namespace or tenant, on this node.
	Connections int `json:"connections,omitempty"`
}

// Entity is what limits apply to: a tenant ("acme"), a namespace
// ("acme/prod"), or one of Kafka's client quota entities (clients.go): a
// user (the principal's name), a client id, or a user with a client id;
// Default ("<default>") names the default user or client id.
type Entity struct {
	Kind     string `json:"kind"` // "tenant", "namespace", "user", "client-id" or "user-client-id"
	Name     string `json:"name"`
	ClientID string `json:"clientId,omitempty"` // "user-client-id" only
}

// Entity kinds.
const (
	KindTenant       = "tenant"
	KindNamespace    = "namespace"
	KindUser         = "user"
	KindClientID     = "client-id"
	KindUserClientID = "user-client-id"
)

func (e Entity) String() string {
	if e.Kind == KindUserClientID {
		return e.Kind + ":" + url.PathEscape(e.Name) + "/" + url.PathEscape(e.ClientID)
	}
	return e.Kind + ":" + e.Name
}

// ParseEntity reads "tenant:acme", "namespace:acme/prod", "user:alice",
// "client-id:app" or "user-client-id:alice/app" (both parts path-escaped).
func ParseEntity(s string) (Entity, error) {
	kind, name, _ := strings.Cut(s, ":")
	e := Entity{Kind: kind, Name: name}
	if kind == KindUserClientID {
		u, c, ok := strings.Cut(name, "/")
		var err1, err2 error
		e.Name, err1 = url.PathUnescape(u)
		e.ClientID, err2 = url.PathUnescape(c)
		if !ok || err1 != nil || err2 != nil {
			e.Name, e.ClientID = "", ""
		}
	}
	return e, e.validate()
}

func (e Entity) validate() error {
	parts := strings.Split(e.Name, "/")
	switch {
	case e.Kind == KindTenant && len(parts) == 1 && parts[0] != "":
	case e.Kind == KindNamespace && len(parts) == 2 && parts[0] != "" && parts[1] != "":
	case (e.Kind == KindUser || e.Kind == KindClientID) && e.Name != "" && e.ClientID == "":
	case e.Kind == KindUserClientID && e.Name != "" && e.ClientID != "":
	default:
		return fmt.Errorf("%w: quota entity %q (want tenant:<tenant>, namespace:<tenant>/<namespace>, user:<name>, client-id:<id> or user-client-id:<name>/<id>)", model.ErrInvalidConfig, e.String())
	}
	return nil
}

// entitiesOf are the entities a topic is charged to.
func entitiesOf(n model.TopicName) [2]Entity {
	return [2]Entity{{Kind: KindNamespace, Name: n.Tenant + "/" + n.Namespace}, {Kind: KindTenant, Name: n.Tenant}}
}

// charge is one bucket a request is charged to: the entity whose limits
// set its rate, and the entity the bucket belongs to (they differ for
// default entities: the default user's quota gives every user a bucket).
type charge struct{ limits, bucket Entity }

// chargesLocked are the buckets bytes of a topic moved by a user ("" when
// anonymous) with a Kafka client id ("" for other protocols) are charged
// to for one direction: the topic's namespace and tenant, and the client
// quota that applies (clients.go). m.mu is held.
func (m *Manager) chargesLocked(n model.TopicName, user, clientID string, d Direction) []charge {
	es := entitiesOf(n)
	out := []charge{{es[0], es[0]}, {es[1], es[1]}}
	if c, ok := m.clientChargeLocked(user, clientID, d); ok {
		out = append(out, c)
	}
	return out
}

// Direction is what a byte rate counts.
type Direction int

// Directions.
const (
	Produce Direction = iota
	Fetch
)

func (d Direction) String() string { return [...]string{"produce", "fetch"}[d] }

const quotaPrefix = "quotas/"

// maxThrottle bounds one throttle (Kafka bounds it by its quota window).
const maxThrottle = 10 * time.Second

// Manager holds the limits, the rate buckets and the usage figures.
type Manager struct {
	meta meta.Store
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	limits  map[Entity]Limits
	buckets map[bucketKey]*bucket
	stats   map[bucketKey]*Stats
	conns   map[Entity]int // open authenticated connections

	usage  atomic.Pointer[map[Entity]Usage]
	active atomic.Bool // any limit set: read on every request, so no lock
}

// Usage is what an entity holds now.
type Usage struct {
	StorageBytes int64 `json:"storageBytes"`
	Topics       int   `json:"topics"`
}

// Stats count what a rate quota saw.
type Stats struct {
	Bytes     int64         // bytes charged
	Throttled time.Duration // throttle time handed out
	Refused   int64         // requests refused while in debt
}

type bucketKey struct {
	e Entity
	d Direction
}

// bucket is a token bucket allowed to go into debt: a request is charged
// in full and the debt says how long to wait.
type bucket struct {
	rate   float64 // bytes per second
	tokens float64
	last   time.Time
}

func (k *bucket) refill(now time.Time) {
	k.tokens = min(k.rate, k.tokens+now.Sub(k.last).Seconds()*k.rate) // one second of burst
	k.last = now
}

func (k *bucket) debt() time.Duration {
	if k.tokens >= 0 {
		return 0
	}
	return min(time.Duration(-k.tokens/k.rate*float64(time.Second)), maxThrottle)
}

// New loads the limits from the metadata store. Usage is known once Run
// has started.
func New(ctx context.Context, store meta.Store, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{meta: store, log: log.With("component", "quota"), now: time.Now,
		buckets: map[bucketKey]*bucket{}, stats: map[bucketKey]*Stats{}, conns: map[Entity]int{}}
	if err := m.load(ctx); err != nil {
		return nil, err
	}
	m.usage.Store(&map[Entity]Usage{})
	return m, nil
}

func (m *Manager) load(ctx context.Context) error {
	kvs, err := m.meta.List(ctx, quotaPrefix)
	if err != nil {
		return fmt.Errorf("load quotas: %w", err)
	}
	limits := map[Entity]Limits{}
	for _, kv := range kvs {
		e, err := ParseEntity(strings.TrimPrefix(kv.Key, quotaPrefix))
		var l Limits
		if err == nil {
			err = json.Unmarshal(kv.Value, &l)
		}
		if err != nil {
			m.log.Warn("skipping unreadable quota", "key", kv.Key, "err", err)
			continue
		}
		limits[e] = l
	}
	m.mu.Lock()
	m.limits = limits
	m.buckets = map[bucketKey]*bucket{} // rates may have changed
	m.active.Store(len(limits) > 0)
	m.mu.Unlock()
	return nil
}

// Set stores an entity's limits (all zero removes them); audited.
func (m *Manager) Set(ctx context.Context, actor string, e Entity, l Limits) error {
	err := e.validate()
	if err == nil && (l.ProduceBytesPerSecond < 0 || l.FetchBytesPerSecond < 0 || l.StorageBytes < 0 || l.Topics < 0 || l.Connections < 0) {
		err = fmt.Errorf("%w: negative quota", model.ErrInvalidConfig)
	}
	if err == nil && e.Kind == KindUser && (l.StorageBytes > 0 || l.Topics > 0) {
		err = fmt.Errorf("%w: users have byte-rate and connection quotas only (storage and topics are per tenant or namespace)", model.ErrInvalidConfig)
	}
	if err == nil && (e.Kind == KindClientID || e.Kind == KindUserClientID) && (l.StorageBytes > 0 || l.Topics > 0 || l.Connections > 0) {
		err = fmt.Errorf("%w: client ids have byte-rate quotas only", model.ErrInvalidConfig)
	}
	if err == nil {
		if l == (Limits{}) {
			err = meta.Delete(ctx, m.meta, quotaPrefix+e.String())
		} else {
			v, _ := json.Marshal(l)
			err = meta.Put(ctx, m.meta, quotaPrefix+e.String(), v)
		}
	}
	if err == nil {
		err = m.load(ctx)
	}
	args := []any{"audit", true, "actor", actor, "action", "set quota", "entity", e.String(), "limits", fmt.Sprintf("%+v", l)}
	if err != nil {
		m.log.Warn("quota change refused", append(args, "err", err)...)
		return err
	}
	m.log.Info("quota change", args...)
	return nil
}

// List returns every entity's limits.
func (m *Manager) List() map[Entity]Limits {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[Entity]Limits, len(m.limits))
	for e, l := range m.limits {
		out[e] = l
	}
	return out
}

// Active reports whether any quota is set (callers skip their accounting
// otherwise).
func (m *Manager) Active() bool { return m != nil && m.active.Load() }

// Usage returns what each entity with a topic holds (refreshed every
// second).
func (m *Manager) Usage() map[Entity]Usage { return *m.usage.Load() }

// Stats returns the rate quotas' counters by entity and direction.
func (m *Manager) Stats() map[Entity]map[Direction]Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[Entity]map[Direction]Stats{}
	for k, s := range m.stats {
		if out[k.e] == nil {
			out[k.e] = map[Direction]Stats{}
		}
		out[k.e][k.d] = *s
	}
	return out
}

// Charge records n bytes a user ("" when anonymous) with a Kafka client id
// ("" for other protocols) moved for a topic and returns how long the
// client should wait (Kafka's throttle time; 0 within quota).
func (m *Manager) Charge(topic model.TopicName, user, clientID string, d Direction, n int) time.Duration {
	if topic.Tenant == "" {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.limits) == 0 {
		return 0
	}
	now := m.now()
	var wait time.Duration
	for _, c := range m.chargesLocked(topic, user, clientID, d) {
		k := m.bucketFor(c, d, now)
		if k == nil {
			continue
		}
		k.tokens -= float64(n)
		st := m.statsFor(c.bucket, d)
		st.Bytes += int64(n)
		if dt := k.debt(); dt > 0 {
			st.Throttled += dt
			wait = max(wait, dt)
		}
	}
	return wait
}

// Admit charges n bytes unless a bucket of the topic or user is in debt,
// in which case nothing is charged and false is returned (RocketMQ's flow
// control: the client is told the broker is busy and retries).
func (m *Manager) Admit(topic model.TopicName, user, clientID string, d Direction, n int) bool {
	if topic.Tenant == "" {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.limits) == 0 {
		return true
	}
	now := m.now()
	type charged struct {
		e Entity
		k *bucket
	}
	var cs []charged
	for _, c := range m.chargesLocked(topic, user, clientID, d) {
		if k := m.bucketFor(c, d, now); k != nil {
			if k.debt() > 0 {
				m.statsFor(c.bucket, d).Refused++
				return false
			}
			cs = append(cs, charged{c.bucket, k})
		}
	}
	for _, c := range cs {
		c.k.tokens -= float64(n)
		m.statsFor(c.e, d).Bytes += int64(n)
	}
	return true
}

// rate returns an entity's byte rate for a direction (0: none). m.mu is
// held.
func (m *Manager) rate(e Entity, d Direction) int64 {
	l := m.limits[e]
	if d == Fetch {
		return l.FetchBytesPerSecond
	}
	return l.ProduceBytesPerSecond
}

// bucketFor returns a charge's refilled bucket for a direction, or nil
// when it has no such limit. m.mu is held.
func (m *Manager) bucketFor(c charge, d Direction, now time.Time) *bucket {
	rate := m.rate(c.limits, d)
	if rate <= 0 {
		return nil
	}
	key := bucketKey{c.bucket, d}
	k := m.buckets[key]
	if k == nil {
		k = &bucket{rate: float64(rate), tokens: float64(rate), last: now}
		m.buckets[key] = k
	}
	k.refill(now)
	return k
}

func (m *Manager) statsFor(e Entity, d Direction) *Stats {
	key := bucketKey{e, d}
	s := m.stats[key]
	if s == nil {
		s = &Stats{}
		m.stats[key] = s
	}
	return s
}

// CheckStorage refuses a write to a topic whose namespace or tenant holds
// its storage quota or more.
func (m *Manager) CheckStorage(topic model.TopicName) error {
	return m.check(topic, func(l Limits, u Usage) (bool, string) {
		return l.StorageBytes > 0 && u.StorageBytes >= l.StorageBytes,
			fmt.Sprintf("holds %d bytes, its storage quota is %d", u.StorageBytes, l.StorageBytes)
	})
}

// CheckTopicCreate refuses a topic past its namespace's or tenant's topic
// quota.
func (m *Manager) CheckTopicCreate(topic model.TopicName) error {
	return m.check(topic, func(l Limits, u Usage) (bool, string) {
		return l.Topics > 0 && u.Topics >= l.Topics, fmt.Sprintf("has %d topics, its topic quota is %d", u.Topics, l.Topics)
	})
}

func (m *Manager) check(topic model.TopicName, over func(Limits, Usage) (bool, string)) error {
	m.mu.Lock()
	limits := m.limits
	m.mu.Unlock()
	if len(limits) == 0 {
		return nil
	}
	usage := *m.usage.Load()
	for _, e := range entitiesOf(topic) {
		if l, ok := limits[e]; ok {
			if bad, why := over(l, usage[e]); bad {
				return fmt.Errorf("%w: %s %s", ErrExceeded, e, why)
			}
		}
	}
	return nil
}

// TopicCreated counts a new topic at once (usage is otherwise refreshed
// every second), so a burst of creations cannot overshoot the quota.
func (m *Manager) TopicCreated(topic model.TopicName) {
	for {
		old := m.usage.Load()
		next := make(map[Entity]Usage, len(*old)+2)
		for e, u := range *old {
			next[e] = u
		}
		for _, e := range entitiesOf(topic) {
			u := next[e]
			u.Topics++
			next[e] = u
		}
		if m.usage.CompareAndSwap(old, &next) {
			return
		}
	}
}

// refreshUsage sums stored bytes and topics by namespace and tenant.
func (m *Manager) refreshUsage(b *broker.Broker) {
	u := map[Entity]Usage{}
	for _, t := range b.Topics(false) {
		bytes, _ := b.TopicBytes(t)
		for _, e := range entitiesOf(t.Name) {
			x := u[e]
			x.StorageBytes += bytes
			x.Topics++
			u[e] = x
		}
	}
	m.usage.Store(&u)
}

// Run refreshes the broker's usage every second until ctx ends.
func (m *Manager) Run(ctx context.Context, b *broker.Broker) {
	m.refreshUsage(b)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.refreshUsage(b)
		}
	}
}

// Entities lists the entities with limits, sorted.
func (m *Manager) Entities() []Entity {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Entity, 0, len(m.limits))
	for e := range m.limits {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Wait sleeps for a throttle time (at most maxThrottle) or until ctx ends:
// how protocols without a throttle field pace a consumer over its fetch
// rate — the answer comes late.
func Wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(min(d, maxThrottle))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Kafka quota keys (kafka-configs --entity-type users) and the limits
// they set.
const (
	KafkaProducerByteRate = "producer_byte_rate"
	KafkaConsumerByteRate = "consumer_byte_rate"
)

// ConnectionEntities are what an authenticated connection counts against:
// its user and, when the user is bound to one, its namespace and tenant.
func ConnectionEntities(user, tenant, namespace string) []Entity {
	var out []Entity
	if user != "" {
		out = append(out, Entity{Kind: KindUser, Name: user})
	}
	if tenant != "" && namespace != "" {
		out = append(out, Entity{Kind: KindNamespace, Name: tenant + "/" + namespace}, Entity{Kind: KindTenant, Name: tenant})
	}
	return out
}

// OpenConnection counts an authenticated connection against its entities'
// connection quotas; it fails when one is full. release uncounts it.
func (m *Manager) OpenConnection(es []Entity) (release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range es {
		if l := m.limits[e]; l.Connections > 0 && m.conns[e] >= l.Connections {
			return nil, fmt.Errorf("%w: %s has %d connections, its connection quota is %d", ErrExceeded, e, m.conns[e], l.Connections)
		}
	}
	for _, e := range es {
		m.conns[e]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, e := range es {
				if m.conns[e]--; m.conns[e] <= 0 {
					delete(m.conns, e)
				}
			}
		})
	}, nil
}

// Connections returns the open authenticated connections by entity.
func (m *Manager) Connections() map[Entity]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[Entity]int, len(m.conns))
	for e, n := range m.conns {
		out[e] = n
	}
	return out
}
