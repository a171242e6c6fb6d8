package kafka

// JoinGroup (key 11), versions 0-9.
//
// Version notes: v0-v2 are served because kafka-go and kafka-python 2.0.2
// hard-code them; v0 has no rebalance timeout (the session timeout is used).
// KIP-394 (MEMBER_ID_REQUIRED) is not enforced: a new member gets its id in
// the join response, as with Kafka before 2.2, which every client accepts.
// Static members (v5+, KIP-345) keep their member id across restarts.
// Member metadata is passed through unparsed.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleJoinGroup(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	if !rc.allowedGroup(req.Group, security.OpRead) {
		resp.Generation, resp.MemberID = -1, req.MemberID
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	jr := groups.JoinRequest{
		Group: req.Group, MemberID: req.MemberID, ClientID: rc.hdr.ClientID, ClientHost: remoteHost(rc),
		ProtocolType: req.ProtocolType, SessionTimeout: time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout: time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
	}
	if req.Version == 0 {
		jr.RebalanceTimeout = jr.SessionTimeout
	}
	if req.InstanceID != nil {
		jr.InstanceID = *req.InstanceID
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, groups.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	be, err := rc.srv().coordinator(req.Group)
	var res groups.JoinResult
	if err == nil {
		res, err = be.groups.Join(rc.ctx(), jr)
	}
	if err == nil {
		err = be.groups.AwaitDurable(rc.ctx(), req.Group)
	}
	resp.Generation = -1
	if err != nil {
		resp.ErrorCode = errorCode(err)
		resp.MemberID = req.MemberID
		return reply{resp: resp}
	}
	resp.Generation = res.Generation
	resp.Protocol = strp(res.Protocol)
	resp.ProtocolType = strp(req.ProtocolType)
	resp.LeaderID = res.Leader
	resp.MemberID = res.MemberID
	for _, m := range res.Members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.MemberID
		jm.ProtocolMetadata = m.Metadata
		if m.InstanceID != "" {
			jm.InstanceID = strp(m.InstanceID)
		}
		resp.Members = append(resp.Members, jm)
	}
	return reply{resp: resp}
}

func remoteHost(rc *reqCtx) string {
	return "/" + rc.conn.nc.RemoteAddr().String()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
