package broker

import (
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/model"
)

// Leader epochs of Kafka partitions (KIP-101, KIP-320): the epoch is the
// term of the queue's replication group less one, 0 on a single node; each
// queue keeps where every epoch began, so consumers can validate their
// positions after a leader change.

// Locate returns where a topic's queue lives (its leader and epoch).
func (b *Broker) Locate(name model.TopicName, index int32) (route.Location, error) {
	id, _, err := b.QueueID(name, index)
	if err != nil {
		return route.Location{Leader: -1, Epoch: -1}, err
	}
	return b.opts.Router.Locate(id), nil
}

// LeaderEpoch returns the current leader epoch of a topic's queue.
func (b *Broker) LeaderEpoch(name model.TopicName, index int32) (model.Epoch, error) {
	loc, err := b.Locate(name, index)
	return loc.Epoch, err
}

// EpochAt returns the leader epoch the message at offset was written in
// (the current epoch at or past the end).
func (b *Broker) EpochAt(name model.TopicName, index int32, offset model.QueueOffset) (model.Epoch, error) {
	id, _, err := b.QueueID(name, index)
	if err != nil {
		return -1, err
	}
	return b.engine.EpochAt(id, offset)
}

// EndOffsetForEpoch returns the largest epoch at or below the requested
// one and the offset where it ends (Kafka's OffsetForLeaderEpoch).
func (b *Broker) EndOffsetForEpoch(name model.TopicName, index int32, epoch model.Epoch) (model.Epoch, model.QueueOffset, error) {
	id, _, err := b.QueueID(name, index)
	if err != nil {
		return -1, -1, err
	}
	return b.engine.EndOffsetForEpoch(id, epoch)
}
