package kafka

// DeleteRecords (key 21), versions 0-2.
//
// Version notes: offset -1 means the high watermark; the answer is the new
// log start offset. Whole segments are reclaimed by retention once no queue
// needs them.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleDeleteRecords(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	s := rc.srv()
	for _, rt := range req.Topics {
		tr := kmsg.NewDeleteRecordsResponseTopic()
		tr.Topic = rt.Topic
		name, nerr := rc.changeableTopicName(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpDelete) {
			nerr = errTopicAuthorization
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.NewDeleteRecordsResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.LowWatermark = -1
			err := nerr
			if err == nil {
				var hw model.QueueOffset
				var pp part
				if pp, err = s.partitionOf(name, rp.Partition); err == nil {
					_, hw, _, err = pp.be.broker.Offsets(pp.topic.Name, pp.index)
				}
				if err == nil {
					off := model.QueueOffset(rp.Offset)
					if rp.Offset == -1 {
						off = hw
					}
					if off < 0 || off > hw {
						err = model.ErrOffsetOutOfRange
					} else {
						var start model.QueueOffset
						start, err = pp.be.broker.SetStartOffset(pp.topic.Name, pp.index, off)
						pr.LowWatermark = int64(start)
					}
				}
			}
			pr.ErrorCode = errorCode(err)
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
