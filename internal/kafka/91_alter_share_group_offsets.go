package kafka

// AlterShareGroupOffsets (key 91), version 0: sets an empty share group's
// start offsets (share_offsets.go); a group with members is NON_EMPTY_GROUP,
// a classic or consumer group GROUP_ID_NOT_FOUND. A group not yet known
// becomes a share group. Records from the new start offset are delivered
// again, those below it are done.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleAlterShareGroupOffsets(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	s := rc.srv()
	if !rc.allowedGroup(req.GroupID, security.OpRead) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	be, err := s.coordinator(req.GroupID)
	if err == nil {
		err = be.groups.EnsureShareGroup(req.GroupID)
	}
	if err == nil {
		if _, active := be.groups.IsShareGroup(req.GroupID); active {
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			return reply{resp: resp}
		}
		err = be.groups.AwaitDurable(rc.ctx(), req.GroupID)
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorCode(err), errorMessage(err)
		return reply{resp: resp}
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		tr.Topic = rt.Topic
		t, terr := rc.lookupTopic(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpRead) {
			t, terr = nil, errTopicAuthorization
		}
		if t != nil {
			tr.TopicID = topicID(t)
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			pr.Partition = rp.Partition
			err := terr
			switch {
			case err != nil:
			case rp.Partition < 0 || int(rp.Partition) >= len(t.All):
				err = model.ErrUnknownQueue
			case rp.StartOffset < 0:
				err = &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "start offset must not be negative"}
			default:
				err = s.setShareStart(rc.ctx(), be, req.GroupID, t, rp.Partition, model.QueueOffset(rp.StartOffset))
			}
			pr.ErrorCode, pr.ErrorMessage = errorCode(err), errorMessage(err)
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
