package broker

import (
	"errors"
	"log/slog"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// maxDecompressedBatch bounds what one batch may inflate to when the broker
// looks inside it.
const maxDecompressedBatch = 256 << 20

// OffsetForTime is the broker's one time lookup (Kafka ListOffsets by
// timestamp, RocketMQ search by timestamp, reset by time): the offset of the
// first message whose timestamp is at or after ts, and that timestamp. The
// queue index finds the stored record (a Kafka batch holds many messages);
// only that record is then decoded to find the exact message inside it. With
// no such message it returns the high watermark and -1.
func (b *Broker) OffsetForTime(name model.TopicName, index int32, ts int64) (model.QueueOffset, int64, error) {
	id, _, err := b.QueueID(name, index)
	if err != nil {
		return 0, -1, err
	}
	off, err := b.engine.OffsetForTime(id, ts)
	if err != nil {
		return 0, -1, err
	}
	return b.exactInRecord(id, off, func(t int64) bool { return t >= ts })
}

// QueueOffsetForTime is OffsetForTime for a storage queue of this broker's
// group (a moved queue's piece here).
func (b *Broker) QueueOffsetForTime(id model.QueueID, ts int64) (model.QueueOffset, int64, error) {
	off, err := b.engine.OffsetForTime(id, ts)
	if err != nil {
		return 0, -1, err
	}
	return b.exactInRecord(id, off, func(t int64) bool { return t >= ts })
}

// OffsetOfMaxTimestamp returns the offset of the first message carrying the
// queue's largest timestamp and that timestamp, or (-1, -1) for an empty
// queue.
func (b *Broker) OffsetOfMaxTimestamp(name model.TopicName, index int32) (model.QueueOffset, int64, error) {
	id, _, err := b.QueueID(name, index)
	if err != nil {
		return 0, -1, err
	}
	off, maxTS, err := b.engine.OffsetOfMaxTimestamp(id)
	if err != nil || off < 0 {
		return off, maxTS, err
	}
	return b.exactInRecord(id, off, func(t int64) bool { return t == maxTS })
}

// exactInRecord reads the record holding offset and returns the first
// message at or after offset whose timestamp satisfies match, with its
// timestamp. Past the high watermark it returns (hw, -1).
func (b *Broker) exactInRecord(id model.QueueID, offset model.QueueOffset, match func(int64) bool) (model.QueueOffset, int64, error) {
	return exactInRecord(b.engine, b.batches, b.log, id, offset, match)
}

func exactInRecord(e *storage.Engine, batches *kbatch.Reader, log *slog.Logger, id model.QueueID, offset model.QueueOffset, match func(int64) bool) (model.QueueOffset, int64, error) {
	res, err := e.Read(id, offset, storage.ReadOptions{MaxRecords: 1})
	if err != nil {
		if errors.Is(err, model.ErrOffsetOutOfRange) && offset >= res.HighWatermark {
			return res.HighWatermark, -1, nil
		}
		return 0, -1, err
	}
	defer res.Release()
	if len(res.Records) == 0 {
		return res.HighWatermark, -1, nil
	}
	r := &res.Records[0]
	if r.Format != model.FormatKafkaBatchV2 {
		return max(offset, r.BaseOffset), r.Timestamp, nil
	}
	found, foundTS := model.QueueOffset(-1), int64(-1)
	err = batches.Records(r.Payload, false, func(rec *kbatch.Record) bool {
		o := r.BaseOffset + model.QueueOffset(rec.OffsetDelta)
		if o >= offset && match(rec.Timestamp) {
			found, foundTS = o, rec.Timestamp
			return false
		}
		return true
	})
	if err != nil || found < 0 {
		// An undecodable batch or no match inside it (timestamps the index
		// does not agree with): answer at batch granularity.
		log.Warn("time lookup fell back to the batch", "queue", id, "offset", r.BaseOffset, "err", err)
		return max(offset, r.BaseOffset), r.Timestamp, nil
	}
	return found, foundTS, nil
}
