package kafka

// DescribeAcls (key 29), versions 0-3.
//
// Version notes: reads the one ACL store every protocol shares (RocketMQ
// ACLs appear here too). v0 filters are literal-only. Needs Describe on
// the cluster. Without the security service: SECURITY_DISABLED. ACLs may
// be managed while authorization is off, so they can be staged before it
// is turned on.

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDescribeAcls(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeACLsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	sec := rc.srv().opts.Security
	if resp.ErrorCode = rc.securityGate(security.OpDescribe); resp.ErrorCode != 0 {
		return reply{resp: resp}
	}
	f, ok := aclFilter(req.Version, int8(req.ResourceType), req.ResourceName, int8(req.ResourcePatternType),
		req.Principal, req.Host, int8(req.Operation), int8(req.PermissionType))
	if !ok {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return reply{resp: resp}
	}
	type resKey struct {
		rt   security.ResourceType
		name string
		pt   security.PatternType
	}
	idx := map[resKey]int{}
	for _, b := range sec.DescribeACLs(f) {
		if !kafkaResourceType(b.ResourceType) {
			continue
		}
		k := resKey{b.ResourceType, b.ResourceName, b.PatternType}
		i, ok := idx[k]
		if !ok {
			i = len(resp.Resources)
			idx[k] = i
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType = kmsg.ACLResourceType(b.ResourceType)
			res.ResourceName = b.ResourceName
			res.ResourcePatternType = kmsg.ACLResourcePatternType(b.PatternType)
			resp.Resources = append(resp.Resources, res)
		}
		acl := kmsg.NewDescribeACLsResponseResourceACL()
		acl.Principal = b.Principal
		acl.Host = b.Host
		acl.Operation = kmsg.ACLOperation(b.Operation)
		acl.PermissionType = kmsg.ACLPermissionType(b.Permission)
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, acl)
	}
	return reply{resp: resp}
}

// kafkaResourceTypes are the resource types Kafka's ACL model has (tenant
// and namespace ACLs are Rosetta's own: the Kafka ACL APIs neither show
// nor delete them).
var kafkaResourceTypes = []security.ResourceType{security.ResourceTopic, security.ResourceGroup,
	security.ResourceCluster, security.ResourceTransactionalID}

func kafkaResourceType(rt security.ResourceType) bool { return slices.Contains(kafkaResourceTypes, rt) }

// aclFilter translates a Kafka ACL filter; v0 has no pattern type and
// means literal. ok is false for values outside the enumerations.
func aclFilter(version int16, rt int8, name *string, pt int8, principal, host *string, op, perm int8) (security.Filter, bool) {
	if version == 0 {
		pt = int8(security.PatternLiteral)
	}
	f := security.Filter{ResourceType: security.ResourceType(rt), PatternType: security.PatternType(pt),
		Operation: security.Operation(op), Permission: security.Permission(perm), Only: kafkaResourceTypes}
	if name != nil {
		f.ResourceName = *name
	}
	if principal != nil {
		f.Principal = *principal
	}
	if host != nil {
		f.Host = *host
	}
	ok := rt >= int8(security.ResourceAny) && rt <= int8(security.ResourceTransactionalID) &&
		pt >= int8(security.PatternAny) && pt <= int8(security.PatternPrefixed) &&
		op >= int8(security.OpAny) && op <= int8(security.OpIdempotentWrite) &&
		perm >= int8(security.PermissionAny) && perm <= int8(security.PermissionAllow)
	return f, ok
}
