package kafka

// DeleteAcls (key 31), versions 0-3.
//
// Version notes: each filter answers the ACLs it removed. v0 filters are
// literal. Needs Alter on the cluster; audited.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDeleteAcls(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	sec := rc.srv().opts.Security
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	fail := func(code int16, msg string) reply {
		for i := range resp.Results {
			resp.Results[i].ErrorCode = code
			if msg != "" {
				resp.Results[i].ErrorMessage = &msg
			}
		}
		return reply{resp: resp}
	}
	if code := rc.securityGate(security.OpAlter); code != 0 {
		return fail(code, "")
	}
	var filters []security.Filter
	var at []int
	for i, f := range req.Filters {
		sf, ok := aclFilter(req.Version, int8(f.ResourceType), f.ResourceName, int8(f.ResourcePatternType),
			f.Principal, f.Host, int8(f.Operation), int8(f.PermissionType))
		if !ok {
			resp.Results[i].ErrorCode = kerr.InvalidRequest.Code
			continue
		}
		filters = append(filters, sf)
		at = append(at, i)
	}
	removed, err := sec.DeleteACLs(rc.ctx(), rc.conn.auth.principal, filters)
	if err != nil {
		return fail(kerr.UnknownServerError.Code, err.Error())
	}
	for j, bs := range removed {
		r := &resp.Results[at[j]]
		for _, b := range bs {
			if !kafkaResourceType(b.ResourceType) {
				continue
			}
			match := kmsg.NewDeleteACLsResponseResultMatchingACL()
			match.ResourceType = kmsg.ACLResourceType(b.ResourceType)
			match.ResourceName = b.ResourceName
			match.ResourcePatternType = kmsg.ACLResourcePatternType(b.PatternType)
			match.Principal = b.Principal
			match.Host = b.Host
			match.Operation = kmsg.ACLOperation(b.Operation)
			match.PermissionType = kmsg.ACLPermissionType(b.Permission)
			r.MatchingACLs = append(r.MatchingACLs, match)
		}
	}
	return reply{resp: resp}
}
