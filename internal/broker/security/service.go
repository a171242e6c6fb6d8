package security

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
)

// Options configure the security service.
type Options struct {
	// Authorization turns ACL checks on; off, every principal may do
	// everything (the single-node default).
	Authorization bool
	// SuperUsers are principals ("User:admin") allowed everything.
	SuperUsers []string
	// AllowIfNoACL allows an operation on a resource no ACL names at all
	// (Kafka allow.everyone.if.no.acl.found).
	AllowIfNoACL bool
	// KeyFile holds the node key that encrypts stored signing secrets;
	// created when missing. Empty: a key for this process only.
	KeyFile string
	// JWT configures token authentication (OAUTHBEARER, RocketMQ access
	// keys that are tokens); zero: off.
	JWT    JWTOptions
	Logger *slog.Logger
}

// Service is the users, credentials and ACLs store and the authorizer.
type Service struct {
	opts  Options
	log   *slog.Logger
	meta  meta.Store
	keys  *keyring
	jwt   *jwtVerifier
	super map[string]bool

	writeMu sync.Mutex // serialises changes
	mu      sync.RWMutex
	users   users
	acls    atomic.Pointer[aclSnapshot]
	cache   decisionCache
}

// New loads the users and ACLs from the metadata store.
func New(ctx context.Context, store meta.Store, opts Options) (*Service, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	keys, err := loadKeyring(opts.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	s := &Service{opts: opts, log: opts.Logger.With("component", "security"), meta: store, keys: keys, super: map[string]bool{}}
	if s.jwt, err = newJWTVerifier(opts.JWT); err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	for _, p := range opts.SuperUsers {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if _, err := ParsePrincipal(p); err != nil {
			return nil, err
		}
		s.super[p] = true
	}
	if err := s.loadUsers(ctx); err != nil {
		return nil, err
	}
	if err := s.loadACLs(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// AuthorizationEnabled reports whether ACLs are checked.
func (s *Service) AuthorizationEnabled() bool { return s.opts.Authorization }

// IsSuperUser reports whether a principal is a super user: named in
// Options.SuperUsers or a user marked super.
func (s *Service) IsSuperUser(p Principal) bool {
	if s.super[p.String()] {
		return true
	}
	if p.Type != "User" {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.users[p.Name]
	return r != nil && r.Super && !r.Disabled
}

// Run follows changes other nodes make to users and ACLs in the metadata
// store until ctx ends (on one node every change is applied as it is made;
// this keeps a cluster's nodes in step).
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, w := range []struct {
		prefix string
		load   func(context.Context) error
	}{{aclPrefix, s.loadACLs}, {usersPrefix, s.loadUsers}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for range s.meta.Watch(ctx, w.prefix) {
					_ = w.load(ctx)
				}
				// Closed: fell behind or ctx ended; re-list, then watch again.
				if ctx.Err() == nil {
					_ = w.load(ctx)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// audit logs an administrative change and its outcome.
func (s *Service) audit(actor Principal, action string, err error, args ...any) {
	args = append([]any{"audit", true, "actor", actor.String(), "action", action}, args...)
	if err != nil {
		s.log.Warn("security change refused", append(args, "err", err)...)
		return
	}
	s.log.Info("security change", args...)
}

const aclPrefix = "acl/"

// aclSnapshot is an immutable copy of every binding, indexed for checks.
type aclSnapshot struct {
	all      []Binding
	literal  map[ResourceType]map[string][]Binding // by name, "*" included
	prefixed map[ResourceType][]Binding
	gen      uint64
}

func newSnapshot(all []Binding, gen uint64) *aclSnapshot {
	sort.Slice(all, func(i, j int) bool { return all[i].String() < all[j].String() })
	sn := &aclSnapshot{all: all, literal: map[ResourceType]map[string][]Binding{}, prefixed: map[ResourceType][]Binding{}, gen: gen}
	for _, b := range all {
		if b.PatternType == PatternPrefixed {
			sn.prefixed[b.ResourceType] = append(sn.prefixed[b.ResourceType], b)
			continue
		}
		m := sn.literal[b.ResourceType]
		if m == nil {
			m = map[string][]Binding{}
			sn.literal[b.ResourceType] = m
		}
		m[b.ResourceName] = append(m[b.ResourceName], b)
	}
	return sn
}

func (s *Service) loadACLs(ctx context.Context) error {
	kvs, err := s.meta.List(ctx, aclPrefix)
	if err != nil {
		return fmt.Errorf("load ACLs: %w", err)
	}
	var all []Binding
	for _, kv := range kvs {
		var b Binding
		if err := json.Unmarshal(kv.Value, &b); err != nil || b.Validate() != nil {
			s.log.Warn("skipping unreadable ACL", "key", kv.Key, "err", err)
			continue
		}
		all = append(all, b)
	}
	var gen uint64
	if old := s.acls.Load(); old != nil {
		gen = old.gen + 1
	}
	s.acls.Store(newSnapshot(all, gen))
	s.cache.reset()
	return nil
}

// CreateACLs stores bindings; each gets its own error (nil: created or
// already there).
func (s *Service) CreateACLs(ctx context.Context, actor Principal, bs []Binding) []error {
	errs := make([]error, len(bs))
	var ops []meta.Op
	for i, b := range bs {
		if errs[i] = b.Validate(); errs[i] != nil {
			continue
		}
		v, _ := json.Marshal(b)
		ops = append(ops, meta.Op{Key: aclPrefix + b.id(), Value: v})
	}
	if len(ops) > 0 {
		s.writeMu.Lock()
		_, err := s.meta.Txn(ctx, nil, ops)
		if err == nil {
			err = s.loadACLs(ctx)
		}
		s.writeMu.Unlock()
		if err != nil {
			for i := range errs {
				if errs[i] == nil {
					errs[i] = fmt.Errorf("store ACL: %w", err)
				}
			}
		}
	}
	for i, b := range bs {
		s.audit(actor, "create acl", errs[i], "acl", b.String())
	}
	return errs
}

// DescribeACLs returns the bindings a filter matches.
func (s *Service) DescribeACLs(f Filter) []Binding {
	var out []Binding
	for _, b := range s.acls.Load().all {
		if f.Matches(b) {
			out = append(out, b)
		}
	}
	return out
}

// DeleteACLs removes what each filter matches and returns, per filter, the
// bindings removed.
func (s *Service) DeleteACLs(ctx context.Context, actor Principal, fs []Filter) ([][]Binding, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	out := make([][]Binding, len(fs))
	seen := map[string]bool{}
	var ops []meta.Op
	for i, f := range fs {
		for _, b := range s.acls.Load().all {
			if f.Matches(b) {
				out[i] = append(out[i], b)
				if id := b.id(); !seen[id] {
					seen[id] = true
					ops = append(ops, meta.Op{Key: aclPrefix + id, Delete: true})
				}
			}
		}
	}
	if len(ops) == 0 {
		return out, nil
	}
	_, err := s.meta.Txn(ctx, nil, ops)
	if err == nil {
		err = s.loadACLs(ctx)
	}
	for _, bs := range out {
		for _, b := range bs {
			s.audit(actor, "delete acl", err, "acl", b.String())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("delete ACLs: %w", err)
	}
	return out, nil
}
