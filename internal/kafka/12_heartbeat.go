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
	be, err := rc.srv().coordinator(req.Group)
	if err == nil {
		err = be.groups.Heartbeat(req.Group, req.MemberID, deref(req.InstanceID), req.Generation)
	}
	resp.ErrorCode = errorCode(err)
	return reply{resp: resp}
}
