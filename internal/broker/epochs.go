package broker

import (
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/model"
)

// Leader epochs of Kafka partitions (KIP-101, KIP-320): the epoch is the
// term of the queue's replication group less one, 0 on a single node; each
// queue keeps where every epoch began, so consumers can validate their
// positions after a leader change.

// A queue moved to another group adds its piece's epoch base (Topic.
// EpochBase) to the group's epochs, so they only grow across the move.

// Locate returns where a topic's queue lives (its leader and epoch).
func (b *Broker) Locate(name model.TopicName, index int32) (route.Location, error) {
	id, t, err := b.QueueID(name, index)
	if err != nil {
		return route.Location{Leader: -1, Epoch: -1}, err
	}
	loc := b.opts.Router.Locate(id)
	if base := b.baseOf(t, index); base > 0 && loc.Epoch >= 0 {
		loc.Epoch += base
	}
	return loc, nil
}

// baseOf is the epoch base of the broker's queue index (0 for its own
// queues: only guests moved here have one).
func (b *Broker) baseOf(t *Topic, index int32) model.Epoch {
	if int(index) < len(t.Queues) {
		return 0
	}
	return t.EpochBase(t.GlobalIndex(b.opts.Placement.Group, int(index)))
}

// LeaderEpoch returns the current leader epoch of a topic's queue.
func (b *Broker) LeaderEpoch(name model.TopicName, index int32) (model.Epoch, error) {
	loc, err := b.Locate(name, index)
	return loc.Epoch, err
}

// EpochAt returns the leader epoch the message at offset was written in
// (the current epoch at or past the end).
func (b *Broker) EpochAt(name model.TopicName, index int32, offset model.QueueOffset) (model.Epoch, error) {
	id, t, err := b.QueueID(name, index)
	if err != nil {
		return -1, err
	}
	e, err := b.engine.EpochAt(id, offset)
	return e + b.baseOf(t, index), err
}

// EndOffsetForEpoch returns the largest epoch at or below the requested
// one and the offset where it ends (Kafka's OffsetForLeaderEpoch).
func (b *Broker) EndOffsetForEpoch(name model.TopicName, index int32, epoch model.Epoch) (model.Epoch, model.QueueOffset, error) {
	id, t, err := b.QueueID(name, index)
	if err != nil {
		return -1, -1, err
	}
	base := b.baseOf(t, index)
	if base == 0 {
		return b.engine.EndOffsetForEpoch(id, epoch)
	}
	// A guest: epochs below its first here are its old groups'; they ended
	// where its piece here begins (a move never truncates).
	list, err := b.engine.Epochs(id)
	if err != nil {
		return -1, -1, err
	}
	if epoch >= 0 && epoch < list[0].Epoch+base {
		return epoch, t.pieceStart(t.GlobalIndex(b.opts.Placement.Group, int(index))), nil
	}
	got, end, err := b.engine.EndOffsetForEpoch(id, epoch-base)
	if got >= 0 {
		got += base
	}
	return got, end, err
}
