package kafka

// TxnOffsetCommit (key 28), versions 0-3.
//
// Version notes: offsets committed inside a transaction are held by the
// transaction coordinator (durably, in its state) and become the group's
// committed offsets when the transaction commits; an abort drops them.
// The group must have been added with AddOffsetsToTxn (INVALID_TXN_STATE
// otherwise). v3 (KIP-447) carries the member's generation, checked
// against the group as OffsetCommit does; while offsets are pending,
// OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleTxnOffsetCommit(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	s := rc.srv()
	perPartition := map[string]map[int32]error{}
	fail := func(topic string, p int32, err error) {
		if perPartition[topic] == nil {
			perPartition[topic] = map[int32]error{}
		}
		perPartition[topic][p] = err
	}
	var offsets []txn.PendingOffset
	var parts []groups.TopicPartitions
	for _, rt := range req.Topics {
		t, err := rc.lookupTopic(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpRead) {
			t, err = nil, errTopicAuthorization
		}
		var tp groups.TopicPartitions
		if err == nil {
			tp.Topic = topicID(t)
		}
		for _, rp := range rt.Partitions {
			switch {
			case err != nil:
				fail(rt.Topic, rp.Partition, err)
			case rp.Partition < 0 || int(rp.Partition) >= len(t.All):
				fail(rt.Topic, rp.Partition, model.ErrUnknownQueue)
			default:
				tp.Partitions = append(tp.Partitions, rp.Partition)
				offsets = append(offsets, txn.PendingOffset{Partition: txn.Partition{Topic: t.Name, Index: rp.Partition, Queue: t.All[rp.Partition]},
					Offset: model.QueueOffset(rp.Offset), Metadata: deref(rp.Metadata), LeaderEpoch: model.Epoch(rp.LeaderEpoch)})
			}
		}
		if err == nil {
			parts = append(parts, tp)
		}
	}
	var err error
	switch {
	case !rc.allowedTxnID(req.TransactionalID, security.OpWrite):
		err, perPartition = errTxnIDAuthorization, nil
	case !rc.allowedGroup(req.Group, security.OpRead):
		err, perPartition = errGroupAuthorization, nil
	default:
		// Sent to the group's coordinator, which checks the member;
		// the offsets wait in the transaction's coordinator.
		var be *backend
		if be, err = s.coordinator(req.Group); err == nil && req.Version >= 3 && (req.Generation >= 0 || req.MemberID != "") {
			err = be.groups.CheckCommit(req.Group, req.MemberID, deref(req.InstanceID), req.Generation, parts)
		}
	}
	if err == nil && len(offsets) > 0 {
		err = s.pendTxnOffsets(rc.ctx(), req, offsets)
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewTxnOffsetCommitResponseTopic()
		tr.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			perr := err
			if e, ok := perPartition[rt.Topic][rp.Partition]; ok {
				perr = e
			}
			part := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			part.Partition = rp.Partition
			part.ErrorCode = errorCode(perr)
			tr.Partitions = append(tr.Partitions, part)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}

// pendTxnOffsets hands a transaction's offsets to its coordinator, here or
// on the member leading its group.
func (s *Server) pendTxnOffsets(ctx context.Context, req *kmsg.TxnOffsetCommitRequest, offsets []txn.PendingOffset) error {
	g := s.coordinatorGroup(req.TransactionalID)
	if be := (*s.be.cur.Load())[g]; be != nil {
		if be.txns == nil {
			return errNoTxnCoordinator
		}
		return be.txns.CommitOffsets(ctx, req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, offsets)
	}
	if s.opts.Remote == nil {
		return errNotCoordinator
	}
	return s.opts.Remote.TxnOffsetCommit(ctx, g, req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, offsets)
}
