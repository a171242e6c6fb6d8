package kafka

// CreateAcls (key 30), versions 0-3.
//
// Version notes: writes the store every protocol's authorizer reads; an
// ACL created twice is one ACL. v0 creations are literal. Needs Alter on
// the cluster. Each creation is audited in the log.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleCreateAcls(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	sec := rc.srv().opts.Security
	code := rc.securityGate(security.OpAlter)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	if code != 0 {
		for i := range resp.Results {
			resp.Results[i].ErrorCode = code
		}
		return reply{resp: resp}
	}
	bs := make([]security.Binding, len(req.Creations))
	for i, c := range req.Creations {
		pt := security.PatternType(c.ResourcePatternType)
		if req.Version == 0 {
			pt = security.PatternLiteral
		}
		bs[i] = security.Binding{ResourceType: security.ResourceType(c.ResourceType), ResourceName: c.ResourceName,
			PatternType: pt, Principal: c.Principal, Host: c.Host,
			Operation: security.Operation(c.Operation), Permission: security.Permission(c.PermissionType)}
		if !kafkaResourceType(bs[i].ResourceType) {
			bs[i].ResourceType = 0 // invalid: reported below
		}
	}
	for i, err := range sec.CreateACLs(rc.ctx(), rc.conn.auth.principal, bs) {
		if err != nil {
			resp.Results[i].ErrorCode = kerr.InvalidRequest.Code
			msg := err.Error()
			resp.Results[i].ErrorMessage = &msg
		}
	}
	return reply{resp: resp}
}
