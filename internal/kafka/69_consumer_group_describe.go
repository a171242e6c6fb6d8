package kafka

// ConsumerGroupDescribe (key 69), versions 0-1.
//
// Version notes: describes consumer-protocol groups: state (Empty,
// Assigning, Reconciling, Stable), group and assignment epochs, the assignor,
// and per member its epoch, subscription, current and target assignment; v1
// gives the member type (1, consumer). Classic and unknown groups are
// GROUP_ID_NOT_FOUND. Authorized operations are not computed.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleConsumerGroupDescribe(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	s := rc.srv()
	for _, id := range req.Groups {
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		g.Group = id
		g.AuthorizedOperations = -2147483648
		if !rc.allowedGroup(id, security.OpDescribe) {
			g.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, g)
			continue
		}
		be, err := s.coordinator(id)
		var d groups.ConsumerDescription
		if err == nil {
			d, err = be.groups.DescribeConsumerGroup(id)
		}
		if err != nil {
			g.ErrorCode, g.ErrorMessage = errorCode(err), errorMessage(err)
			resp.Groups = append(resp.Groups, g)
			continue
		}
		g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName = string(d.State), d.Epoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			dm.MemberID = m.MemberID
			dm.MemberEpoch = m.MemberEpoch
			dm.ClientID = m.ClientID
			dm.ClientHost = m.ClientHost
			dm.SubscribedTopics = m.SubscribedTopicNames
			dm.Assignment = s.describedAssignment(rc.conn.home, m.Assignment)
			dm.TargetAssignment = s.describedAssignment(rc.conn.home, m.TargetAssignment)
			dm.MemberType = 1
			if dm.SubscribedTopics == nil {
				dm.SubscribedTopics = []string{}
			}
			if m.InstanceID != "" {
				dm.InstanceID = strp(m.InstanceID)
			}
			if m.RackID != "" {
				dm.RackID = strp(m.RackID)
			}
			if m.SubscribedTopicRegex != "" {
				dm.SubscribedTopicRegex = strp(m.SubscribedTopicRegex)
			}
			g.Members = append(g.Members, dm)
		}
		resp.Groups = append(resp.Groups, g)
	}
	return reply{resp: resp}
}

// describedAssignment names the topics of an assignment.
func (s *Server) describedAssignment(h home, tps []groups.TopicPartitions) kmsg.Assignment {
	a := kmsg.NewAssignment()
	a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
	for _, tp := range tps {
		name := ""
		if t, err := s.cat().TopicByID(tp.Topic); err == nil {
			name = kafkaName(h, t)
		}
		part := kmsg.NewAssignmentTopicPartition()
		part.TopicID = tp.Topic
		part.Topic = name
		part.Partitions = tp.Partitions
		a.TopicPartitions = append(a.TopicPartitions, part)
	}
	return a
}
