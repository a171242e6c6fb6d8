package kafka

// DeleteShareGroupOffsets (key 92), version 0: forgets an empty share
// group's place in whole topics (share_offsets.go): its next member starts
// where share.auto.offset.reset says. A group with members is
// NON_EMPTY_GROUP, another kind of group or an unknown one
// GROUP_ID_NOT_FOUND.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDeleteShareGroupOffsets(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	s := rc.srv()
	if !rc.allowedGroup(req.GroupID, security.OpDelete) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	be, err := s.coordinator(req.GroupID)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorCode(err), errorMessage(err)
		return reply{resp: resp}
	}
	share, active := be.groups.IsShareGroup(req.GroupID)
	switch {
	case !share:
		resp.ErrorCode = errorCode(groups.ErrGroupNotFound)
		return reply{resp: resp}
	case active:
		resp.ErrorCode = kerr.NonEmptyGroup.Code
		return reply{resp: resp}
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		tr.Topic = rt.Topic
		t, err := rc.lookupTopic(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpRead) {
			t, err = nil, errTopicAuthorization
		}
		if t != nil {
			tr.TopicID = topicID(t)
			for p := range t.All {
				if err = s.setShareStart(rc.ctx(), be, req.GroupID, t, int32(p), -1); err != nil {
					break
				}
			}
		}
		tr.ErrorCode, tr.ErrorMessage = errorCode(err), errorMessage(err)
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
