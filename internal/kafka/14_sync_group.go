package kafka

// SyncGroup (key 14), versions 0-5.
//
// Version notes: the leader's assignments are opaque bytes handed to each
// member; followers wait for the leader. v5 echoes the protocol type and name.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleSyncGroup(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	if !rc.allowedGroup(req.Group, security.OpRead) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	assignments := make(map[string][]byte, len(req.GroupAssignment))
	for _, a := range req.GroupAssignment {
		assignments[a.MemberID] = a.MemberAssignment
	}
	be, err := rc.srv().coordinator(req.Group)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	a, proto, err := be.groups.Sync(rc.ctx(), req.Group, req.MemberID, deref(req.InstanceID), req.Generation, assignments)
	if err == nil {
		err = be.groups.AwaitDurable(rc.ctx(), req.Group)
	}
	resp.ErrorCode = errorCode(err)
	resp.MemberAssignment = a
	if err == nil {
		resp.ProtocolType = req.ProtocolType
		resp.Protocol = strp(proto)
	}
	return reply{resp: resp}
}
