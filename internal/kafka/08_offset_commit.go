package kafka

// OffsetCommit (key 8), versions 0-9.
//
// Version notes: members commit with their generation, checked against the
// group; generation -1 commits (simple consumers, admin tools) are accepted
// while the group has no members. For consumer-protocol (KIP-848) groups the
// generation is the member epoch: the current epoch, or an older one for
// partitions the member still owns since that epoch (STALE_MEMBER_EPOCH
// otherwise; UNKNOWN_MEMBER_ID for a member not in the group). v0 commits are stored like the others.
// Commits are durable under the storage durability policy before the answer.
// Retention time (v2-4) and leader epochs are accepted and ignored.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleOffsetCommit(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	s := rc.srv()
	var parts []groups.TopicPartitions
	for _, rt := range req.Topics {
		if t, err := rc.lookupTopic(rt.Topic); err == nil {
			tp := groups.TopicPartitions{Topic: topicID(t)}
			for _, rp := range rt.Partitions {
				tp.Partitions = append(tp.Partitions, rp.Partition)
			}
			parts = append(parts, tp)
		}
	}
	be, gerr := s.coordinator(req.Group)
	if gerr == nil {
		gerr = be.groups.CheckCommit(req.Group, req.MemberID, deref(req.InstanceID), req.Generation, parts)
		if req.Version == 0 || (req.Generation < 0 && req.MemberID == "") {
			gerr = nil
		}
	}
	if !rc.allowedGroup(req.Group, security.OpRead) {
		gerr = errGroupAuthorization
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewOffsetCommitResponseTopic()
		tr.Topic = rt.Topic
		err := gerr
		if err == nil && !rc.allowedTopic(rt.Topic, security.OpRead) {
			err = errTopicAuthorization
		}
		var t *broker.Topic
		if err == nil {
			var name model.TopicName
			if name, err = rc.topicName(rt.Topic); err == nil {
				t, err = s.cat().Topic(name)
			}
		}
		commits := map[int32]broker.OffsetCommit{}
		perPartition := map[int32]error{}
		for _, rp := range rt.Partitions {
			switch {
			case err != nil:
				perPartition[rp.Partition] = err
			case rp.Partition < 0 || int(rp.Partition) >= len(t.All):
				perPartition[rp.Partition] = model.ErrUnknownQueue
			default:
				commits[rp.Partition] = broker.OffsetCommit{Offset: model.QueueOffset(rp.Offset), Metadata: deref(rp.Metadata), LeaderEpoch: model.Epoch(rp.LeaderEpoch)}
			}
		}
		if len(commits) > 0 {
			if cerr := commitOffsets(rc.ctx(), be, req.Group, t, commits); cerr != nil {
				for p := range commits {
					perPartition[p] = cerr
				}
			}
		}
		for _, rp := range rt.Partitions {
			part := kmsg.NewOffsetCommitResponseTopicPartition()
			part.Partition = rp.Partition
			part.ErrorCode = errorCode(perPartition[rp.Partition])
			tr.Partitions = append(tr.Partitions, part)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
