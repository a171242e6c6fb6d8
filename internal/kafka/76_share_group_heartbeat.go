package kafka

// ShareGroupHeartbeat (key 76), version 1: a share group member joins
// (epoch 0), heartbeats and leaves (epoch -1) its group (KIP-932).
//
// Version notes: member ids are the clients' own (KIP-1082). The simple
// assignor gives every subscribed partition at least one member and spreads
// the members over them (several members share a partition when they
// outnumber its topic's partitions); the member takes its assignment at its
// next heartbeat, nothing is revoked first. The session timeout and
// heartbeat interval are the group's share.session.timeout.ms and
// share.heartbeat.interval.ms (45 s and 5 s by default). A group id held by
// a classic or consumer group is GROUP_ID_NOT_FOUND.
//
// Not implemented: rack-aware assignment; GROUP_MAX_SIZE_REACHED.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleShareGroupHeartbeat(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ShareGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	s := rc.srv()
	if !rc.allowedGroup(req.GroupID, security.OpRead) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	for _, t := range req.SubscribedTopicNames {
		if !rc.allowedTopic(t, security.OpDescribe) {
			resp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.ErrorMessage = strp("not authorized to describe subscribed topic " + t)
			return reply{resp: resp}
		}
	}
	h := groups.ShareHeartbeat{Group: req.GroupID, MemberID: req.MemberID, MemberEpoch: req.MemberEpoch, RackID: req.RackID,
		SubscribedTopicNames: req.SubscribedTopicNames, ClientID: rc.hdr.ClientID, ClientHost: remoteHost(rc)}
	be, err := s.coordinator(req.GroupID)
	var res groups.ShareHeartbeatResult
	if err == nil {
		res, err = be.groups.ShareGroupHeartbeat(groupTopics{s, rc.conn.home}, h)
	}
	if err == nil {
		err = be.groups.AwaitDurable(rc.ctx(), req.GroupID)
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorCode(err), errorMessage(err)
		rc.conn.log.Debug("share group heartbeat refused", "group", req.GroupID, "member", req.MemberID, "err", err)
		return reply{resp: resp}
	}
	resp.MemberID = &req.MemberID
	resp.MemberEpoch = res.MemberEpoch
	resp.HeartbeatIntervalMillis = int32(res.HeartbeatInterval / time.Millisecond)
	if res.Assignment != nil {
		a := new(kmsg.ShareGroupHeartbeatResponseAssignment)
		a.Default()
		a.TopicPartitions = []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition{}
		for _, tp := range res.Assignment {
			at := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
			at.TopicID = tp.Topic
			at.Partitions = tp.Partitions
			a.TopicPartitions = append(a.TopicPartitions, at)
		}
		resp.Assignment = a
	}
	return reply{resp: resp}
}
