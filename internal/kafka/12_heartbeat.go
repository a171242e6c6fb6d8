package kafka

// Heartbeat (key 12), versions 0-4.
//
// Version notes: REBALANCE_IN_PROGRESS tells a member to rejoin; v3+ carries
// the static instance id.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleHeartbeat(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if !rc.allowedGroup(req.Group, security.OpRead) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	resp.ErrorCode = errorCode(rc.srv().groups.Heartbeat(req.Group, req.MemberID, deref(req.InstanceID), req.Generation))
	return reply{resp: resp}
}
