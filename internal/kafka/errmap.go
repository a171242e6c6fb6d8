package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
)

// errorCode maps a core error to its Kafka error code. It is the only place
// where Rosetta errors become Kafka codes.
// controllerErrorCode maps the error of a change to the cluster's
// metadata (topics, partitions): a member whose broker lost its
// leadership meanwhile answers NOT_CONTROLLER, on which clients look the
// controller up again and retry, where they would give up on
// NOT_LEADER_OR_FOLLOWER.
func controllerErrorCode(err error) int16 {
	if errors.Is(err, model.ErrNotLeader) {
		return kerr.NotController.Code
	}
	return errorCode(err)
}

func errorCode(err error) int16 {
	var be *kbatch.Error
	var ke *kafkaCodeError
	var re *produce.RecordErrors
	switch {
	case err == nil:
		return 0
	case errors.As(err, &re), errors.Is(err, produce.ErrControlBatch), errors.Is(err, produce.ErrMixedTransactional),
		errors.Is(err, produce.ErrIllegalTimer):
		return kerr.InvalidRecord.Code
	case errors.Is(err, produce.ErrNoCoordinator):
		return kerr.CoordinatorNotAvailable.Code
	case errors.As(err, &ke):
		return ke.code
	case errors.As(err, &be):
		if be.Unsupported {
			return kerr.UnsupportedForMessageFormat.Code
		}
		if be.Corrupt {
			return kerr.CorruptMessage.Code
		}
		return kerr.InvalidRecord.Code
	case errors.Is(err, model.ErrUnknownTopic), errors.Is(err, model.ErrUnknownQueue):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, model.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, model.ErrInvalidTopic):
		return kerr.InvalidTopicException.Code
	case errors.Is(err, model.ErrInvalidQueueCount):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, model.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, model.ErrMessageTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, model.ErrCorruptRecord):
		return kerr.CorruptMessage.Code
	case errors.Is(err, model.ErrDiskFull), errors.Is(err, model.ErrTierUnavailable):
		return kerr.KafkaStorageError.Code // retriable
	case errors.Is(err, quota.ErrExceeded):
		return kerr.PolicyViolation.Code
	case errors.Is(err, model.ErrInvalidReplicationFactor):
		return kerr.InvalidReplicationFactor.Code
	case errors.Is(err, model.ErrInvalidConfig):
		return kerr.InvalidConfig.Code
	case errors.Is(err, model.ErrNotLeader):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, model.ErrClosed), errors.Is(err, context.Canceled):
		return kerr.NotLeaderForPartition.Code // retriable: the node is going away
	case errors.Is(err, context.DeadlineExceeded):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, groups.ErrUnknownMember):
		return kerr.UnknownMemberID.Code
	case errors.Is(err, groups.ErrIllegalGeneration):
		return kerr.IllegalGeneration.Code
	case errors.Is(err, groups.ErrRebalanceInProgress):
		return kerr.RebalanceInProgress.Code
	case errors.Is(err, groups.ErrInconsistentProtocol):
		return kerr.InconsistentGroupProtocol.Code
	case errors.Is(err, groups.ErrInvalidSessionTimeout):
		return kerr.InvalidSessionTimeout.Code
	case errors.Is(err, pop.ErrInvalidRecordState):
		return kerr.InvalidRecordState.Code
	case errors.Is(err, pop.ErrInvalidAck):
		return kerr.InvalidRequest.Code
	case errors.Is(err, groups.ErrGroupNotEmpty):
		return kerr.NonEmptyGroup.Code
	case errors.Is(err, groups.ErrGroupNotFound):
		return kerr.GroupIDNotFound.Code
	case errors.Is(err, groups.ErrFencedInstance):
		return kerr.FencedInstanceID.Code
	case errors.Is(err, groups.ErrStateNotDurable):
		return kerr.CoordinatorNotAvailable.Code
	case errors.Is(err, groups.ErrInvalidGroupID):
		return kerr.InvalidGroupID.Code
	case errors.Is(err, groups.ErrInvalidRequest):
		return kerr.InvalidRequest.Code
	case errors.Is(err, groups.ErrFencedMemberEpoch):
		return kerr.FencedMemberEpoch.Code
	case errors.Is(err, groups.ErrStaleMemberEpoch):
		return kerr.StaleMemberEpoch.Code
	case errors.Is(err, groups.ErrUnsupportedAssignor):
		return kerr.UnsupportedAssignor.Code
	case errors.Is(err, groups.ErrUnreleasedInstanceID):
		return kerr.UnreleasedInstanceID.Code
	case errors.Is(err, groups.ErrInvalidRegex):
		return kerr.InvalidRegularExpression.Code
	case errors.Is(err, txn.ErrInvalidProducerIDMapping):
		return kerr.InvalidProducerIDMapping.Code
	case errors.Is(err, txn.ErrProducerFenced):
		return kerr.ProducerFenced.Code
	case errors.Is(err, txn.ErrInvalidProducerEpoch):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, txn.ErrInvalidTxnState), errors.Is(err, txn.ErrNotInTransaction):
		return kerr.InvalidTxnState.Code
	case errors.Is(err, txn.ErrConcurrentTransactions):
		return kerr.ConcurrentTransactions.Code
	case errors.Is(err, txn.ErrInvalidTimeout):
		return kerr.InvalidTransactionTimeout.Code
	case errors.Is(err, txn.ErrUnknownTransactionalID):
		return kerr.TransactionalIDNotFound.Code
	case errors.Is(err, producers.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, producers.ErrInvalidEpoch):
		return kerr.InvalidProducerEpoch.Code
	}
	return kerr.UnknownServerError.Code
}

// errorMessage is the message sent with codes that carry one.
func errorMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}

func isUnknownTopic(err error) bool { return errors.Is(err, model.ErrUnknownTopic) }

var (
	errNoTxnCoordinator  = &kafkaCodeError{code: kerr.CoordinatorNotAvailable.Code, msg: "no transaction coordinator"}
	errUnknownTopicID    = &kafkaCodeError{code: kerr.UnknownTopicID.Code, msg: "unknown topic id"}
	errUnknownPartition  = fmt.Errorf("%w: no such partition", model.ErrUnknownQueue)
	errInvalidPartitions = fmt.Errorf("%w: partition count must grow", model.ErrInvalidQueueCount)
)
