package kafka

// ShareGroupDescribe (key 77), version 1.
//
// Version notes: describes share groups: state (Empty, Stable), group and
// assignment epochs, the assignor (simple), and per member its epoch,
// subscription and assignment. Classic, consumer and unknown groups are
// GROUP_ID_NOT_FOUND. Authorized operations are not computed.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleShareGroupDescribe(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ShareGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	s := rc.srv()
	for _, id := range req.GroupIDs {
		g := kmsg.NewShareGroupDescribeResponseGroup()
		g.GroupID = id
		if !rc.allowedGroup(id, security.OpDescribe) {
			g.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, g)
			continue
		}
		be, err := s.coordinator(id)
		var d groups.ShareDescription
		if err == nil {
			d, err = be.groups.DescribeShareGroup(id)
		}
		if err != nil {
			g.ErrorCode, g.ErrorMessage = errorCode(err), errorMessage(err)
			resp.Groups = append(resp.Groups, g)
			continue
		}
		g.GroupState, g.GroupEpoch, g.AssignmentEpoch, g.Assignor = string(d.State), d.Epoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			dm := kmsg.NewShareGroupDescribeResponseGroupMember()
			dm.MemberID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = m.MemberID, m.MemberEpoch, m.ClientID, m.ClientHost
			dm.SubscribedTopicNames = m.SubscribedTopicNames
			if dm.SubscribedTopicNames == nil {
				dm.SubscribedTopicNames = []string{}
			}
			if m.RackID != "" {
				dm.RackID = strp(m.RackID)
			}
			da := s.describedAssignment(rc.conn.home, m.Assignment)
			for _, tp := range da.TopicPartitions {
				at := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
				at.TopicID, at.Topic, at.Partitions = tp.TopicID, tp.Topic, tp.Partitions
				dm.Assignment.TopicPartitions = append(dm.Assignment.TopicPartitions, at)
			}
			if dm.Assignment.TopicPartitions == nil {
				dm.Assignment.TopicPartitions = []kmsg.ShareGroupDescribeResponseGroupMemberAssignmentTopicPartition{}
			}
			g.Members = append(g.Members, dm)
		}
		if g.Members == nil {
			g.Members = []kmsg.ShareGroupDescribeResponseGroupMember{}
		}
		resp.Groups = append(resp.Groups, g)
	}
	return reply{resp: resp}
}
