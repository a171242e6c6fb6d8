package kafka

// OffsetDelete (key 47), version 0.
//
// Version notes: removes a group's committed offsets for the given
// partitions; refused with GROUP_SUBSCRIBED_TO_TOPIC... is not checked: the
// group must simply have no members (NON_EMPTY_GROUP otherwise).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleOffsetDelete(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	s := rc.srv()
	if !rc.allowedGroup(req.Group, security.OpDelete) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	be, err := s.coordinator(req.Group)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	if d := be.groups.Describe(req.Group); len(d.Members) > 0 {
		resp.ErrorCode = kerr.NonEmptyGroup.Code
		return reply{resp: resp}
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewOffsetDeleteResponseTopic()
		tr.Topic = rt.Topic
		t, err := rc.lookupTopic(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpRead) {
			err = errTopicAuthorization
		}
		var parts []int32
		for _, p := range rt.Partitions {
			parts = append(parts, p.Partition)
		}
		if err == nil {
			err = deleteOffsets(rc.ctx(), be, req.Group, t, parts)
		}
		for _, p := range rt.Partitions {
			part := kmsg.NewOffsetDeleteResponseTopicPartition()
			part.Partition = p.Partition
			part.ErrorCode = errorCode(err)
			tr.Partitions = append(tr.Partitions, part)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
