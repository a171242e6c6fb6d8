package kafka

// LeaveGroup (key 13), versions 0-5.
//
// Version notes: v0-2 name one member; v3+ leave in batches by member id or
// static instance id, with a per-member error.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleLeaveGroup(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if !rc.allowedGroup(req.Group, security.OpRead) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	be, err := rc.srv().coordinator(req.Group)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	if req.Version < 3 {
		errs := be.groups.Leave(req.Group, []groups.LeaveMember{{MemberID: req.MemberID}})
		err := errs[0]
		if err == nil {
			err = be.groups.AwaitDurable(rc.ctx(), req.Group)
		}
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	leaving := make([]groups.LeaveMember, len(req.Members))
	for i, m := range req.Members {
		leaving[i] = groups.LeaveMember{MemberID: m.MemberID, InstanceID: deref(m.InstanceID)}
	}
	errs := be.groups.Leave(req.Group, leaving)
	if err := be.groups.AwaitDurable(rc.ctx(), req.Group); err != nil {
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	for i, m := range req.Members {
		member := kmsg.NewLeaveGroupResponseMember()
		member.MemberID = m.MemberID
		member.InstanceID = m.InstanceID
		member.ErrorCode = errorCode(errs[i])
		resp.Members = append(resp.Members, member)
	}
	return reply{resp: resp}
}
