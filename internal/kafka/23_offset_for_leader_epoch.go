package kafka

// OffsetForLeaderEpoch (key 23), versions 0-4.
//
// Version notes: answers from the partition's leader-epoch cache (KIP-101
// with KIP-279's rule): the current epoch ends at the high watermark; an
// older epoch answers the largest epoch at or below it and the offset where
// the next one begins; an epoch newer than any known answers (-1, -1). v2+
// CurrentLeaderEpoch is checked first (older: FENCED_LEADER_EPOCH, newer:
// UNKNOWN_LEADER_EPOCH). librdkafka asks for exactly v2.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleOffsetForLeaderEpoch(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	s := rc.srv()
	for _, rt := range req.Topics {
		tr := kmsg.NewOffsetForLeaderEpochResponseTopic()
		tr.Topic = rt.Topic
		name, nerr := rc.topicName(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpDescribe) {
			nerr = errTopicAuthorization
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.LeaderEpoch = -1
			pr.EndOffset = -1
			switch {
			case nerr != nil:
				pr.ErrorCode = errorCode(nerr)
			default:
				pp, err := s.partitionOf(name, rp.Partition)
				if err == nil {
					err = checkPartitionEpoch(pp, rp.CurrentLeaderEpoch)
				}
				var epoch model.Epoch
				var end model.QueueOffset
				if err == nil {
					epoch, end, err = pp.be.broker.EndOffsetForEpoch(pp.topic.Name, pp.index, model.Epoch(rp.LeaderEpoch))
				}
				pr.ErrorCode = errorCode(err)
				if err != nil {
					rc.conn.log.Debug("offset for leader epoch refused", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				}
				if err == nil {
					pr.LeaderEpoch, pr.EndOffset = int32(epoch), int64(end)
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
