package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// debuggingReplica is the replica id of Kafka's reads of one replica's own
// copy of a partition (DEBUGGING_REPLICA_ID): Fetch and ListOffsets with it
// may be answered by a follower, as tools comparing replicas expect.
const debuggingReplica = -2

// copyPart is a partition as this member's copy of its group's log holds it.
type copyPart struct {
	log   *broker.LogCopy
	queue model.QueueID
}

// logCopy finds this member's copy of partition p of t for a debugging
// replica's request that this member cannot serve as the leader (perr: a
// *model.NotLeaderError); false otherwise, or when it holds no copy.
func (s *Server) logCopy(t *broker.Topic, p int32, replica int32, perr error) (copyPart, bool) {
	var nl *model.NotLeaderError
	if replica != debuggingReplica || s.opts.LogCopy == nil || !errors.As(perr, &nl) || p < 0 || int(p) >= len(t.All) {
		return copyPart{}, false
	}
	lc := s.opts.LogCopy(int(t.GroupOf(int(p))))
	if lc == nil {
		return copyPart{}, false
	}
	return copyPart{log: lc, queue: t.All[p]}, true
}

// fetchCopy is fetchPartition on a copy: read_uncommitted (a follower does
// not track open transactions for readers), up to the copy's high
// watermark, without long polling.
func fetchCopy(cp copyPart, offset model.QueueOffset, budget int, first bool, pr *kmsg.FetchResponseTopicPartition) (int, error) {
	start, hw, _, err := cp.log.Offsets(cp.queue)
	if err != nil {
		return 0, err
	}
	pr.HighWatermark, pr.LastStableOffset, pr.LogStartOffset = int64(hw), int64(hw), int64(start)
	if offset < start || offset > hw {
		return 0, model.ErrOffsetOutOfRange
	}
	if offset >= hw || (budget <= 0 && !first) {
		return 0, nil
	}
	res, err := cp.log.Read(cp.queue, offset, broker.ReadOptions{MaxBytes: max(budget, 1)})
	if err != nil {
		return 0, err
	}
	defer res.Release()
	out, _, err := encodeStored(res.Records, offset, hw)
	if err != nil {
		return 0, err
	}
	if out != nil {
		pr.RecordBatches = out
	}
	return len(out), nil
}

// listCopyOffset is listOffset on a copy: -2 its log start, -1 its log end
// (a debugging replica is not a client: no isolation), -3 and timestamps
// looked up in it. It returns the offset, its timestamp and its epoch.
func listCopyOffset(cp copyPart, ts int64) (model.QueueOffset, int64, error) {
	start, hw, end, err := cp.log.Offsets(cp.queue)
	if err != nil {
		return 0, -1, err
	}
	switch ts {
	case -2:
		return start, -1, nil
	case -1:
		return end, -1, nil
	case -3:
		return cp.log.OffsetOfMaxTimestamp(cp.queue)
	}
	off, found, err := cp.log.OffsetForTime(cp.queue, ts)
	if err != nil {
		return 0, -1, err
	}
	if off >= hw || found < 0 {
		return -1, -1, nil
	}
	return off, found, nil
}

// logCopyOf is logCopy for a request that has not looked the partition up.
func (s *Server) logCopyOf(t *broker.Topic, p int32, replica int32) (copyPart, bool) {
	if replica != debuggingReplica {
		return copyPart{}, false
	}
	_, err := s.partition(t, p)
	return s.logCopy(t, p, replica, err)
}
