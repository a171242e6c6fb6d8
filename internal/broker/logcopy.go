package broker

import (
	"log/slog"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// LogCopy reads a replication group's log as this member holds it, leader
// or not, by queue id: what Kafka's debugging replica id (-2) asks for,
// so that tools comparing replicas see each member's own copy. A follower's
// copy is visible up to the commit index it knows.
type LogCopy struct {
	engine  *storage.Engine
	batches *kbatch.Reader
	log     *slog.Logger
}

// NewLogCopy reads e.
func NewLogCopy(e *storage.Engine, log *slog.Logger) *LogCopy {
	return &LogCopy{engine: e, batches: kbatch.NewReader(maxDecompressedBatch), log: log}
}

// Offsets returns a queue's start offset, high watermark and log end
// offset in this copy.
func (c *LogCopy) Offsets(id model.QueueID) (start, hw, end model.QueueOffset, err error) {
	return c.engine.Offsets(id)
}

// Read reads a queue's records from offset in this copy.
func (c *LogCopy) Read(id model.QueueID, offset model.QueueOffset, opts ReadOptions) (*ReadResult, error) {
	return c.engine.Read(id, offset, opts)
}

// EpochAt returns the leader epoch the record holding offset was written in.
func (c *LogCopy) EpochAt(id model.QueueID, offset model.QueueOffset) (model.Epoch, error) {
	return c.engine.EpochAt(id, offset)
}

// OffsetForTime is Broker.OffsetForTime on this copy.
func (c *LogCopy) OffsetForTime(id model.QueueID, ts int64) (model.QueueOffset, int64, error) {
	off, err := c.engine.OffsetForTime(id, ts)
	if err != nil {
		return 0, -1, err
	}
	return exactInRecord(c.engine, c.batches, c.log, id, off, func(t int64) bool { return t >= ts })
}

// OffsetOfMaxTimestamp is Broker.OffsetOfMaxTimestamp on this copy.
func (c *LogCopy) OffsetOfMaxTimestamp(id model.QueueID) (model.QueueOffset, int64, error) {
	off, maxTS, err := c.engine.OffsetOfMaxTimestamp(id)
	if err != nil || off < 0 {
		return off, maxTS, err
	}
	return exactInRecord(c.engine, c.batches, c.log, id, off, func(t int64) bool { return t == maxTS })
}
