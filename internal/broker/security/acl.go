// Package security is Rosetta's one authentication and authorization model,
// shared by every protocol: principals, users with salted and iterated
// credentials (SCRAM; secrets for signatures encrypted at rest), ACL
// bindings (principal × resource × operation, allow or deny) and the
// authorizer that every request path asks. Front-ends translate their
// protocol's resources and actions into this model; the ACL admin APIs of
// Kafka and RocketMQ and the HTTP API read and write the same store.
//
// The enumerations number like Kafka's ACL model (the richest of the
// protocols), so the Kafka front-end maps them one to one; RocketMQ's
// actions map onto them (Pub → Write, Sub → Read, Get/List → Describe …).
package security

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ResourceType is what an ACL protects.
type ResourceType int8

// Resource types (Kafka's numbering; Tenant and Namespace are Rosetta's).
const (
	ResourceAny             ResourceType = 1
	ResourceTopic           ResourceType = 2
	ResourceGroup           ResourceType = 3
	ResourceCluster         ResourceType = 4
	ResourceTransactionalID ResourceType = 5
	ResourceTenant          ResourceType = 20
	ResourceNamespace       ResourceType = 21
)

var resourceNames = map[ResourceType]string{
	ResourceAny: "any", ResourceTopic: "topic", ResourceGroup: "group", ResourceCluster: "cluster",
	ResourceTransactionalID: "transactional_id", ResourceTenant: "tenant", ResourceNamespace: "namespace",
}

func (r ResourceType) String() string { return enumName(resourceNames, r, "resource") }

// ParseResourceType reads a resource type by name (any case, - or _).
func ParseResourceType(s string) (ResourceType, error) {
	return parseEnum(resourceNames, s, "resource type")
}

// PatternType says how an ACL's resource name matches.
type PatternType int8

// Pattern types (Kafka's numbering).
const (
	PatternAny      PatternType = 1
	PatternMatch    PatternType = 2 // filters only: whatever would match the name
	PatternLiteral  PatternType = 3 // the name exactly, or every name when it is "*"
	PatternPrefixed PatternType = 4 // every name starting with it
)

var patternNames = map[PatternType]string{PatternAny: "any", PatternMatch: "match", PatternLiteral: "literal", PatternPrefixed: "prefixed"}

func (p PatternType) String() string { return enumName(patternNames, p, "pattern") }

// ParsePatternType reads a pattern type by name.
func ParsePatternType(s string) (PatternType, error) {
	return parseEnum(patternNames, s, "pattern type")
}

// Operation is an action on a resource.
type Operation int8

// Operations (Kafka's numbering).
const (
	OpAny             Operation = 1
	OpAll             Operation = 2
	OpRead            Operation = 3 // consume
	OpWrite           Operation = 4 // produce
	OpCreate          Operation = 5
	OpDelete          Operation = 6
	OpAlter           Operation = 7
	OpDescribe        Operation = 8
	OpClusterAction   Operation = 9
	OpDescribeConfigs Operation = 10
	OpAlterConfigs    Operation = 11
	OpIdempotentWrite Operation = 12
)

var operationNames = map[Operation]string{
	OpAny: "any", OpAll: "all", OpRead: "read", OpWrite: "write", OpCreate: "create", OpDelete: "delete",
	OpAlter: "alter", OpDescribe: "describe", OpClusterAction: "cluster_action", OpDescribeConfigs: "describe_configs",
	OpAlterConfigs: "alter_configs", OpIdempotentWrite: "idempotent_write",
}

func (o Operation) String() string { return enumName(operationNames, o, "operation") }

// ParseOperation reads an operation by name; "produce", "consume" and
// "admin" are accepted for write, read and all.
func ParseOperation(s string) (Operation, error) {
	switch strings.ToLower(s) {
	case "produce", "pub":
		return OpWrite, nil
	case "consume", "sub":
		return OpRead, nil
	case "admin":
		return OpAll, nil
	}
	return parseEnum(operationNames, s, "operation")
}

// Permission is allow or deny.
type Permission int8

// Permissions (Kafka's numbering).
const (
	PermissionAny   Permission = 1
	PermissionDeny  Permission = 2
	PermissionAllow Permission = 3
)

var permissionNames = map[Permission]string{PermissionAny: "any", PermissionDeny: "deny", PermissionAllow: "allow"}

func (p Permission) String() string { return enumName(permissionNames, p, "permission") }

// ParsePermission reads allow, deny or any.
func ParsePermission(s string) (Permission, error) {
	return parseEnum(permissionNames, s, "permission")
}

// enumName is a value's name, or kind(n) for a value without one.
func enumName[T ~int8](names map[T]string, v T, kind string) string {
	if s, ok := names[v]; ok {
		return s
	}
	return fmt.Sprintf("%s(%d)", kind, int8(v))
}

func parseEnum[T ~int8](names map[T]string, s, what string) (T, error) {
	norm := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for v, n := range names {
		if n == norm || strings.ReplaceAll(n, "_", "") == norm {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown %s %q", ErrInvalid, what, s)
}

// Binding is one ACL: principal (User:name, User:* for everyone) from host
// (* for any) may or may not perform an operation on a resource pattern.
type Binding struct {
	ResourceType ResourceType `json:"resourceType"`
	ResourceName string       `json:"resourceName"`
	PatternType  PatternType  `json:"patternType"`
	Principal    string       `json:"principal"`
	Host         string       `json:"host"`
	Operation    Operation    `json:"operation"`
	Permission   Permission   `json:"permission"`
}

// Validate checks a binding is concrete (no "any" or "match" values).
func (b Binding) Validate() error {
	switch {
	case b.ResourceType == ResourceAny || resourceNames[b.ResourceType] == "":
		return fmt.Errorf("%w: resource type %v", ErrInvalid, b.ResourceType)
	case b.PatternType != PatternLiteral && b.PatternType != PatternPrefixed:
		return fmt.Errorf("%w: pattern type %v", ErrInvalid, b.PatternType)
	case b.ResourceName == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalid)
	case b.ResourceType == ResourceCluster && b.ResourceName != ClusterResourceName:
		return fmt.Errorf("%w: the cluster resource is named %q", ErrInvalid, ClusterResourceName)
	case b.Operation == OpAny || operationNames[b.Operation] == "":
		return fmt.Errorf("%w: operation %v", ErrInvalid, b.Operation)
	case b.Permission != PermissionAllow && b.Permission != PermissionDeny:
		return fmt.Errorf("%w: permission %v", ErrInvalid, b.Permission)
	case b.Host == "":
		return fmt.Errorf("%w: empty host (use *)", ErrInvalid)
	}
	if strings.Contains(b.Host, "/") {
		if _, err := netip.ParsePrefix(b.Host); err != nil {
			return fmt.Errorf("%w: host range %q: %v", ErrInvalid, b.Host, err)
		}
	}
	if _, err := ParsePrincipal(b.Principal); err != nil {
		return err
	}
	return nil
}

// id names a binding in the store: equal bindings share a key, so creating
// one twice is one ACL.
func (b Binding) id() string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%d\x00%s\x00%s\x00%d\x00%d",
		b.ResourceType, b.ResourceName, b.PatternType, b.Principal, b.Host, b.Operation, b.Permission))
	return hex.EncodeToString(h[:16])
}

func (b Binding) String() string {
	return fmt.Sprintf("%s %s on %s %s:%s from %s: %s", b.Principal, b.Permission, b.ResourceType, b.PatternType,
		b.ResourceName, b.Host, b.Operation)
}

// ClusterResourceName is the one cluster resource's name (Kafka's).
const ClusterResourceName = "kafka-cluster"

// Filter selects bindings; zero-valued or "any" fields match everything.
type Filter struct {
	ResourceType ResourceType `json:"resourceType,omitzero"`
	ResourceName string       `json:"resourceName,omitempty"` // "" matches any
	PatternType  PatternType  `json:"patternType,omitzero"`
	Principal    string       `json:"principal,omitempty"` // "" matches any
	Host         string       `json:"host,omitempty"`      // "" matches any
	Operation    Operation    `json:"operation,omitzero"`
	Permission   Permission   `json:"permission,omitzero"`
	// Only, when set, limits the filter to these resource types (a
	// protocol that does not know every type leaves the others alone).
	Only []ResourceType `json:"-"`
}

// Matches reports whether a binding passes the filter (Kafka's
// AclBindingFilter semantics, including MATCH: every pattern that would
// apply to the named resource).
func (f Filter) Matches(b Binding) bool {
	if f.ResourceType != 0 && f.ResourceType != ResourceAny && f.ResourceType != b.ResourceType {
		return false
	}
	if f.Only != nil && !slices.Contains(f.Only, b.ResourceType) {
		return false
	}
	switch f.PatternType {
	case 0, PatternAny:
		if f.ResourceName != "" && f.ResourceName != b.ResourceName {
			return false
		}
	case PatternMatch:
		if f.ResourceName != "" && !patternApplies(b, f.ResourceName) {
			return false
		}
	default:
		if f.PatternType != b.PatternType || (f.ResourceName != "" && f.ResourceName != b.ResourceName) {
			return false
		}
	}
	return (f.Principal == "" || f.Principal == b.Principal) &&
		(f.Host == "" || f.Host == b.Host) &&
		(f.Operation == 0 || f.Operation == OpAny || f.Operation == b.Operation) &&
		(f.Permission == 0 || f.Permission == PermissionAny || f.Permission == b.Permission)
}

// patternApplies reports whether a binding's pattern covers a resource name.
func patternApplies(b Binding, name string) bool {
	switch b.PatternType {
	case PatternLiteral:
		return b.ResourceName == name || b.ResourceName == Wildcard
	case PatternPrefixed:
		return strings.HasPrefix(name, b.ResourceName)
	}
	return false
}

// Wildcard is the literal resource name, principal name and host that
// match everything.
const Wildcard = "*"

// Text forms, so JSON (the HTTP API, the stored bindings) uses names.

func (r ResourceType) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *ResourceType) UnmarshalText(b []byte) (err error) {
	*r, err = ParseResourceType(string(b))
	return err
}

func (p PatternType) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p *PatternType) UnmarshalText(b []byte) (err error) {
	*p, err = ParsePatternType(string(b))
	return err
}

func (o Operation) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

func (o *Operation) UnmarshalText(b []byte) (err error) {
	*o, err = ParseOperation(string(b))
	return err
}

func (p Permission) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p *Permission) UnmarshalText(b []byte) (err error) {
	*p, err = ParsePermission(string(b))
	return err
}
