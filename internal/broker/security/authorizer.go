package security

import (
	"net/netip"
	"strings"
	"sync"

	"github.com/rosettamq/rosetta/internal/model"
)

// Authorize reports whether a principal connected from host may perform an
// operation on a resource. Deny wins over allow; super users may do
// everything; Describe is implied by Read, Write, Delete and Alter, and
// DescribeConfigs by AlterConfigs (Kafka's rules). A topic is also covered
// by ACLs on its namespace ("tenant/namespace") and tenant. Decisions are
// cached until the ACLs change.
func (s *Service) Authorize(p Principal, host string, rt ResourceType, name string, op Operation) bool {
	if !s.opts.Authorization || s.IsSuperUser(p) {
		return true
	}
	sn := s.acls.Load()
	key := decisionKey{p: p, host: host, rt: rt, name: name, op: op}
	if v, ok := s.cache.get(sn.gen, key); ok {
		return v
	}
	v := s.decide(sn, p, host, rt, name, op)
	s.cache.put(sn.gen, key, v)
	return v
}

func (s *Service) decide(sn *aclSnapshot, p Principal, host string, rt ResourceType, name string, op Operation) bool {
	var found []Binding
	collect := func(rt ResourceType, name string) {
		found = append(found, sn.literal[rt][name]...)
		if name != Wildcard {
			found = append(found, sn.literal[rt][Wildcard]...)
		}
		for _, b := range sn.prefixed[rt] {
			if strings.HasPrefix(name, b.ResourceName) {
				found = append(found, b)
			}
		}
	}
	collect(rt, name)
	if rt == ResourceTopic || rt == ResourceGroup {
		if t, err := model.ParseTopicName(name); err == nil {
			collect(ResourceNamespace, t.Tenant+"/"+t.Namespace)
			collect(ResourceTenant, t.Tenant)
		}
	}
	if len(found) == 0 {
		return s.opts.AllowIfNoACL
	}
	ps, anyUser := p.String(), p.Type+":"+Wildcard
	allowed := false
	for _, b := range found {
		if (b.Principal != ps && b.Principal != anyUser) || !hostMatches(b.Host, host) {
			continue
		}
		if b.Permission == PermissionDeny {
			if b.Operation == op || b.Operation == OpAll {
				return false
			}
			continue
		}
		if implies(b.Operation, op) {
			allowed = true
		}
	}
	return allowed
}

// implies reports whether an allowed operation grants op.
func implies(granted, op Operation) bool {
	switch {
	case granted == op || granted == OpAll:
		return true
	case op == OpDescribe:
		return granted == OpRead || granted == OpWrite || granted == OpDelete || granted == OpAlter
	case op == OpDescribeConfigs:
		return granted == OpAlterConfigs
	}
	return false
}

// AuthorizeAny reports whether a principal is allowed op on at least one
// resource of a type (Kafka's authorizeByResourceType, which lets an
// idempotent producer in with Write on any topic).
func (s *Service) AuthorizeAny(p Principal, host string, rt ResourceType, op Operation) bool {
	if !s.opts.Authorization || s.IsSuperUser(p) {
		return true
	}
	ps, anyUser := p.String(), p.Type+":"+Wildcard
	allowed := false
	for _, b := range s.acls.Load().all {
		covers := b.ResourceType == rt ||
			(rt == ResourceTopic && (b.ResourceType == ResourceNamespace || b.ResourceType == ResourceTenant))
		if !covers || (b.Principal != ps && b.Principal != anyUser) || !hostMatches(b.Host, host) {
			continue
		}
		if b.Permission == PermissionDeny && b.PatternType == PatternLiteral && b.ResourceName == Wildcard &&
			(b.Operation == op || b.Operation == OpAll) {
			return false
		}
		if b.Permission == PermissionAllow && implies(b.Operation, op) {
			allowed = true
		}
	}
	return allowed
}

// decisionKey is one cached question.
type decisionKey struct {
	p    Principal
	host string
	rt   ResourceType
	name string
	op   Operation
}

// decisionCache remembers answers for one ACL generation; it is bounded
// and starts over when full or when the ACLs change.
type decisionCache struct {
	mu  sync.RWMutex
	gen uint64
	m   map[decisionKey]bool
}

const maxCachedDecisions = 1 << 16

func (c *decisionCache) get(gen uint64, k decisionKey) (bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gen != gen || c.m == nil {
		return false, false
	}
	v, ok := c.m[k]
	return v, ok
}

func (c *decisionCache) put(gen uint64, k decisionKey, v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || c.m == nil || len(c.m) >= maxCachedDecisions {
		c.gen, c.m = gen, map[decisionKey]bool{}
	}
	c.m[k] = v
}

func (c *decisionCache) reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// hostMatches reports whether a binding's host covers a client address:
// "*", the address itself, or a CIDR range holding it (RocketMQ's source
// IP ranges).
func hostMatches(pattern, host string) bool {
	if pattern == Wildcard || pattern == host {
		return true
	}
	if !strings.Contains(pattern, "/") {
		return false
	}
	prefix, err := netip.ParsePrefix(pattern)
	if err != nil {
		return false
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && prefix.Contains(addr.Unmap())
}
