package kafka

// ConsumerGroupHeartbeat (key 68), versions 0-1: the KIP-848 consumer group
// protocol, with broker-side assignment.
//
// Version notes: the broker computes each group's target assignment with the
// `uniform` (sticky, balanced) or `range` assignor the members ask for and
// reconciles members incrementally: a partition moves only after its owner
// has revoked it, and members keep consuming every partition that stays
// theirs. Subscriptions are topic names or (v1) a regular expression matched
// on the broker against the whole topic name of every topic, Kafka's internal
// ones included (as Kafka 4 does).
// v0 lets the broker choose member ids: a v0 join with an empty member id
// gets one. Static members (instance ids) may leave with epoch -2 and come
// back under a new member id to the same assignment within the session
// timeout. The session timeout and heartbeat interval are broker settings
// (broker.group_consumer_session_timeout, ..._heartbeat_interval).
//
// Not implemented: rack-aware assignment; KIP-1071 streams groups; online
// migration of a classic group with members (an empty group converts).

import (
	"crypto/rand"
	"encoding/base64"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleConsumerGroupHeartbeat(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	s := rc.srv()
	if !rc.allowedGroup(req.Group, security.OpRead) {
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
	h := groups.ConsumerHeartbeat{
		Group: req.Group, MemberID: req.MemberID, MemberEpoch: req.MemberEpoch,
		InstanceID: req.InstanceID, RackID: req.RackID,
		RebalanceTimeout:     time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		SubscribedTopicNames: req.SubscribedTopicNames, SubscribedTopicRegex: req.SubscribedTopicRegex,
		ServerAssignor: req.ServerAssignor, ClientID: rc.hdr.ClientID, ClientHost: remoteHost(rc),
	}
	if req.RebalanceTimeoutMillis < 0 {
		h.RebalanceTimeout = -1
	}
	if req.Version == 0 && h.MemberID == "" && h.MemberEpoch == 0 {
		h.MemberID = newMemberID() // v0: the broker names new members
	}
	if req.Topics != nil {
		h.Owned = make([]groups.TopicPartitions, 0, len(req.Topics))
		for _, t := range req.Topics {
			h.Owned = append(h.Owned, groups.TopicPartitions{Topic: t.TopicID, Partitions: t.Partitions})
		}
	}
	be, err := s.coordinator(req.Group)
	var res groups.ConsumerHeartbeatResult
	if err == nil {
		res, err = be.groups.ConsumerGroupHeartbeat(groupTopics{s, rc.conn.home}, h)
	}
	if err == nil {
		// The member is told its epoch and assignment only once the
		// group's state holding them is durable.
		err = be.groups.AwaitDurable(rc.ctx(), req.Group)
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorCode(err), errorMessage(err)
		rc.conn.log.Debug("consumer group heartbeat refused", "group", req.Group, "member", req.MemberID, "err", err)
		return reply{resp: resp}
	}
	resp.MemberID = &res.MemberID
	resp.MemberEpoch = res.MemberEpoch
	resp.HeartbeatIntervalMillis = int32(res.HeartbeatInterval / time.Millisecond)
	if res.Assignment != nil {
		a := new(kmsg.ConsumerGroupHeartbeatResponseAssignment)
		a.Default()
		a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
		for _, tp := range res.Assignment {
			at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			at.TopicID = tp.Topic
			at.Partitions = tp.Partitions
			a.Topics = append(a.Topics, at)
		}
		resp.Assignment = a
	}
	return reply{resp: resp}
}

// newMemberID makes a random member id (as KIP-848 v1 clients do).
func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
