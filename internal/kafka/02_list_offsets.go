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
// it names. Kafka's debugging replica id (-2) is answered by a cluster
// member from its own copy of a partition it does not lead (-1: the copy's
// log end offset).

import (
	"context"
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
			} else if cp, ok := s.logCopyOf(t, rp.Partition, req.ReplicaID); ok {
				if off, ts, err := listCopyOffset(cp, rp.Timestamp); err != nil {
					pr.ErrorCode = errorCode(err)
				} else {
					pr.Offset, pr.Timestamp = int64(off), ts
					if off >= 0 {
						epoch, _ := cp.log.EpochAt(cp.queue, off)
						pr.LeaderEpoch = int32(epoch)
					}
					if req.Version == 0 {
						pr.OldStyleOffsets = []int64{int64(off)}
					}
				}
			} else if pp, off, ts, err := s.listOffset(rc.ctx(), t, rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp, req.IsolationLevel == 1); err != nil {
				pr.ErrorCode = errorCode(err)
			} else {
				pr.Offset, pr.Timestamp = int64(off), ts
				if off >= 0 {
					epoch, _ := pp.be.broker.EpochAt(pp.topic.Name, pp.index, off)
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

func (s *Server) listOffset(ctx context.Context, t *broker.Topic, partition, currentEpoch int32, ts int64, committed bool) (part, model.QueueOffset, int64, error) {
	pp, err := s.partition(t, partition)
	if err != nil {
		return pp, 0, -1, err
	}
	b, name, idx := pp.be.broker, pp.topic.Name, pp.index
	start, hw, _, err := b.Offsets(name, idx)
	if err != nil {
		return pp, 0, -1, err
	}
	if err := checkPartitionEpoch(pp, currentEpoch); err != nil {
		return pp, 0, -1, err
	}
	if committed {
		hw = pp.be.txnIndex.LastStable(pp.queue, hw)
	}
	switch ts {
	case -2:
		off, err := s.historyStart(ctx, pp, start)
		return pp, off, -1, err
	case -1:
		return pp, hw, -1, nil
	case -3:
		off, maxTS, err := b.OffsetOfMaxTimestamp(name, idx)
		return pp, off, maxTS, err
	}
	// A moved partition's older records are in the groups it was in.
	if off, found, ok, err := s.historyOffsetForTime(ctx, pp, ts); ok || err != nil {
		return pp, off, found, err
	}
	off, found, err := b.OffsetForTime(name, idx, ts)
	if err != nil {
		return pp, 0, -1, err
	}
	if off >= hw || found < 0 {
		return pp, -1, -1, nil
	}
	return pp, off, found, nil
}
