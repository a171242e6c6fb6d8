package kafka

// ListOffsets (key 2), versions 0-7.
//
// Version notes: timestamp -2 is the log start offset, -1 the high watermark
// (read_uncommitted) or last stable offset (read_committed: below the oldest
// open transaction), -3 (KIP-734) the offset of the largest timestamp, and
// any other value the first offset whose record timestamp is at or after it
// with that record's timestamp (exact inside multi-record batches: the
// broker's time lookup decodes the one batch concerned). v0's
// MaxNumOffsets answers with at most one offset. v4+: CurrentLeaderEpoch is
// checked (KIP-320) and each answer carries the leader epoch of the offset
// it names.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleListOffsets(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	s := rc.srv()
	for _, rt := range req.Topics {
		tr := kmsg.NewListOffsetsResponseTopic()
		tr.Topic = rt.Topic
		t, nerr := rc.lookupTopic(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpDescribe) {
			nerr = errTopicAuthorization
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.NewListOffsetsResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.Timestamp = -1
			pr.Offset = -1
			pr.LeaderEpoch = -1
			if nerr != nil {
				pr.ErrorCode = errorCode(nerr)
			} else if off, ts, err := s.listOffset(t, rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp, req.IsolationLevel == 1); err != nil {
				pr.ErrorCode = errorCode(err)
			} else {
				pr.Offset, pr.Timestamp = int64(off), ts
				if off >= 0 {
					epoch, _ := s.broker.EpochAt(t.Name, rp.Partition, off)
					pr.LeaderEpoch = int32(epoch)
				}
				if req.Version == 0 {
					pr.OldStyleOffsets = []int64{int64(off)}
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}

func (s *Server) listOffset(t *broker.Topic, partition, currentEpoch int32, ts int64, committed bool) (model.QueueOffset, int64, error) {
	start, hw, _, err := s.broker.Offsets(t.Name, partition)
	if err != nil {
		return 0, -1, err
	}
	if err := s.checkPartitionEpoch(t.Name, partition, currentEpoch); err != nil {
		return 0, -1, err
	}
	if committed {
		hw = s.txnIndex.LastStable(t.Queues[partition], hw)
	}
	switch ts {
	case -2:
		return start, -1, nil
	case -1:
		return hw, -1, nil
	case -3:
		off, maxTS, err := s.broker.OffsetOfMaxTimestamp(t.Name, partition)
		return off, maxTS, err
	}
	off, found, err := s.broker.OffsetForTime(t.Name, partition, ts)
	if err != nil {
		return 0, -1, err
	}
	if off >= hw || found < 0 {
		return -1, -1, nil
	}
	return off, found, nil
}
