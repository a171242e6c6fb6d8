package broker

// Reading queues message by message, whatever protocol wrote them: neutral
// messages as stored, Kafka batches record by record (the key as the key,
// headers as headers, a rocketmq.TAGS header as the tag). Kafka
// transaction markers and records of aborted transactions are skipped, and
// reading stops at the last stable offset (records of open transactions
// wait), so consumers of other protocols see only committed Kafka data.

import (
	"context"
	"fmt"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// KafkaTagsHeader is the Kafka header carrying RocketMQ tags.
const KafkaTagsHeader = "rocketmq.TAGS"

// KafkaRecordMessage views a Kafka record as a message. Byte fields alias
// the record (valid during the reader's callback only).
func KafkaRecordMessage(r *kbatch.Record) model.Message {
	m := model.Message{Body: r.Value, BornTime: r.Timestamp}
	if !r.KeyNull {
		m.Key = r.Key
	}
	for _, h := range r.Headers {
		if h.Key == KafkaTagsHeader {
			m.Tags = string(h.Value)
			continue
		}
		m.Headers = append(m.Headers, model.Header{Key: h.Key, Value: h.Value})
	}
	return m
}

// HiddenKafkaBatch says whether a stored record is a Kafka transaction
// marker or a batch of an aborted transaction.
func (b *Broker) HiddenKafkaBatch(q model.QueueID, r *StoredRecord) bool {
	if r.Format != model.FormatKafkaBatchV2 || len(r.Payload) < kbatch.HeaderSize {
		return false
	}
	h := kbatch.ReadHeader(r.Payload)
	if h.Attributes&kbatch.AttrTransactional == 0 {
		return false
	}
	return h.Attributes&kbatch.AttrControl != 0 || b.opts.KafkaTxns.IsAborted(q, h.ProducerID, r.BaseOffset)
}

// StoredMessage is one message read by EachMessage. Its byte fields alias
// storage and are valid during the callback only.
type StoredMessage struct {
	Offset    model.QueueOffset
	StoreTime int64
	Message   model.Message
}

// EachMessage reads queue q from offset, calling fn for each visible message
// (at most maxRecords storage records) until fn returns false. It returns
// the offset after the last message looked at (skipped ones included).
func (b *Broker) EachMessage(q model.QueueID, from model.QueueOffset, maxRecords int, fn func(*StoredMessage) bool) (model.QueueOffset, error) {
	_, _, _, stable, err := b.queueOffsets(q)
	if err != nil {
		return from, err
	}
	if from >= stable {
		return from, nil
	}
	res, err := b.readQueue(q, from, storage.ReadOptions{MaxRecords: maxRecords, MaxBytes: 4 << 20})
	if err != nil {
		return from, err
	}
	defer res.Release()
	return b.EachMessageOf(q, res, from, stable, fn)
}

// EachMessageOf calls fn for each visible message of records read from
// queue q (from offset, below stable) until fn returns false, as
// EachMessage does; it serves reads of another group's queue (Elsewhere),
// whose aborted Kafka transactions this broker does not know: only their
// markers are skipped.
func (b *Broker) EachMessageOf(q model.QueueID, res *storage.ReadResult, from, stable model.QueueOffset, fn func(*StoredMessage) bool) (model.QueueOffset, error) {
	next := from
	var sm StoredMessage
	for i := range res.Records {
		r := &res.Records[i]
		if r.BaseOffset >= stable {
			break
		}
		more := true
		switch {
		case r.Format == model.FormatMessage:
			if r.BaseOffset >= from {
				m, err := DecodeMessage(r.Payload)
				if err != nil {
					return next, err
				}
				sm = StoredMessage{Offset: r.BaseOffset, StoreTime: r.StoreTime, Message: m}
				more = fn(&sm)
			}
			next = r.BaseOffset + 1
		case r.Format == model.FormatKafkaBatchV2 && !b.HiddenKafkaBatch(q, r):
			err := b.batches.Records(r.Payload, true, func(kr *kbatch.Record) bool {
				off := r.BaseOffset + model.QueueOffset(kr.OffsetDelta)
				if off < from {
					return true
				}
				sm = StoredMessage{Offset: off, StoreTime: r.StoreTime, Message: KafkaRecordMessage(kr)}
				more = fn(&sm)
				next = off + 1
				return more
			})
			if err != nil {
				return next, err
			}
			if more {
				next = r.BaseOffset + model.QueueOffset(r.Count)
			}
		default: // hidden or internal records
			next = r.BaseOffset + model.QueueOffset(r.Count)
		}
		if !more {
			return next, nil
		}
	}
	return max(next, min(res.NextOffset, stable)), nil
}

// EachMessageElsewhere reads queue q of group g through Elsewhere (from
// offset, below stable, at most maxRecords records), calling fn for each
// visible message as EachMessage does.
func (b *Broker) EachMessageElsewhere(ctx context.Context, g model.GroupID, q model.QueueID, from, stable model.QueueOffset, maxRecords int, fn func(*StoredMessage) bool) (model.QueueOffset, error) {
	if b.opts.Elsewhere == nil {
		return from, fmt.Errorf("%w: group %d is elsewhere on a single node", model.ErrUnknownQueue, g)
	}
	res, err := b.opts.Elsewhere.Read(ctx, g, q, from, storage.ReadOptions{MaxRecords: maxRecords, MaxBytes: 4 << 20})
	if err != nil {
		return from, err
	}
	defer res.Release()
	return b.EachMessageOf(q, res, from, stable, fn)
}
