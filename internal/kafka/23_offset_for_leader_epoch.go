package kafka

// OffsetForLeaderEpoch (key 23), versions 0-4.
//
// Version notes: a single node has one leader epoch per partition, reported
// as 0 here: asking for epoch 0 (or any epoch not above it) answers the high
// watermark, the end of that epoch; a larger epoch is FENCED_LEADER_EPOCH
// (v2+ CurrentLeaderEpoch above ours likewise). librdkafka asks for exactly
// v2.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleOffsetForLeaderEpoch(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	s := rc.srv()
	for _, rt := range req.Topics {
		tr := kmsg.OffsetForLeaderEpochResponseTopic{Topic: rt.Topic}
		name, nerr := rc.topicName(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpDescribe) {
			nerr = errTopicAuthorization
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.OffsetForLeaderEpochResponseTopicPartition{Partition: rp.Partition, LeaderEpoch: -1, EndOffset: -1}
			switch {
			case nerr != nil:
				pr.ErrorCode = errorCode(nerr)
			case rp.CurrentLeaderEpoch > 0 || rp.LeaderEpoch > 0:
				pr.ErrorCode = kerr.FencedLeaderEpoch.Code
			default:
				_, hw, _, err := s.broker.Offsets(name, rp.Partition)
				pr.ErrorCode = errorCode(err)
				if err == nil {
					pr.LeaderEpoch, pr.EndOffset = 0, int64(hw)
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
