package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/model"
)

var (
	errFencedLeaderEpoch  = &kafkaCodeError{code: kerr.FencedLeaderEpoch.Code, msg: "the request's leader epoch is older than the partition's"}
	errUnknownLeaderEpoch = &kafkaCodeError{code: kerr.UnknownLeaderEpoch.Code, msg: "the request's leader epoch is newer than the partition's"}
)

// checkPartitionEpoch validates a request's current leader epoch for one
// partition.
func (s *Server) checkPartitionEpoch(name model.TopicName, partition, client int32) error {
	current, err := s.broker.LeaderEpoch(name, partition)
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
