package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/model"
)

var (
	errFencedLeaderEpoch  = &kafkaCodeError{code: kerr.FencedLeaderEpoch.Code, msg: "the request's leader epoch is older than the partition's"}
	errUnknownLeaderEpoch = &kafkaCodeError{code: kerr.UnknownLeaderEpoch.Code, msg: "the request's leader epoch is newer than the partition's"}
)

// currentLeader returns the leader KIP-951 names in a partition refused
// with NOT_LEADER_OR_FOLLOWER (ok false for other errors).
func currentLeader(err error) (leader, epoch int32, ok bool) {
	var nl *model.NotLeaderError
	if errors.As(err, &nl) {
		return int32(nl.Leader), int32(nl.Epoch), true
	}
	return -1, -1, false
}

// checkPartitionEpoch validates a request's current leader epoch for one
// partition.
func checkPartitionEpoch(pp part, client int32) error {
	current, err := pp.be.broker.LeaderEpoch(pp.topic.Name, pp.index)
	if err != nil {
		return err
	}
	return checkLeaderEpoch(client, current)
}

// checkLeaderEpoch validates a request's current leader epoch against the
// partition's (KIP-320): -1 is not checked; an older epoch is fenced, a newer
// one unknown to this leader (the client knows of a later leader: retry).
func checkLeaderEpoch(client int32, current model.Epoch) error {
	switch {
	case client < 0 || model.Epoch(client) == current:
		return nil
	case model.Epoch(client) < current:
		return errFencedLeaderEpoch
	}
	return errUnknownLeaderEpoch
}
