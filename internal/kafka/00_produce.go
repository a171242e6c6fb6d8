package kafka

// Produce (key 0), versions 0-11 advertised.
//
// Version notes: min version 0 is advertised because librdkafka < 2.11.1
// turns compression off otherwise; v0-2 bodies (magic 0/1 message sets) get
// UNSUPPORTED_FOR_MESSAGE_FORMAT. Record batches are validated (framing,
// magic 2, CRC32C, record count) but never re-encoded: each
// batch is stored as received, with its base offset rewritten by storage.
// acks=0 sends no response; acks=1 answers once written; acks=all waits for
// the durability policy (fsync with group commit in sync mode). Idempotent
// batches are deduplicated per producer and partition: a retried batch gets
// its original offset, a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER.
// LogAppendTime topics get the append time and a recomputed CRC.
//
// Batches are decoded once (not re-encoded) to put record keys into the key
// index, which RocketMQ's QUERY_MESSAGE reads. Topics with
// cleanup.policy=compact refuse records without a key: the partition gets
// INVALID_RECORD naming each offending record's index in its batch (KIP-467).
// Other invalid batches are named as a whole (index 0).
//
// Transactional batches must come from the producer id and epoch of an open
// transaction that added the partition (INVALID_TXN_STATE otherwise;
// INVALID_PRODUCER_EPOCH for a fenced epoch); the partition's transaction
// index learns of the batch before it is appended, so the last stable
// offset never passes it. Control batches from clients are INVALID_RECORD.
//
// A partition this node does not lead is NOT_LEADER_OR_FOLLOWER with KIP-951's
// CurrentLeader; otherwise CurrentLeader keeps its defaults (-1), so a
// client never reads a leader change into a successful answer.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleProduce(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	s := rc.srv()
	var maxEnd model.LogPos
	var throttle time.Duration
	txnDenied := req.TransactionID != nil && !rc.allowedTxnID(*req.TransactionID, security.OpWrite)
	for _, rt := range req.Topics {
		tr := kmsg.NewProduceResponseTopic()
		tr.Topic = rt.Topic
		t, nerr := rc.lookupTopic(rt.Topic)
		switch {
		case txnDenied:
			nerr = errTxnIDAuthorization
		case !rc.allowedTopic(rt.Topic, security.OpWrite):
			nerr = errTopicAuthorization
		case nerr == nil && s.opts.Quotas.Active():
			nerr = s.opts.Quotas.CheckStorage(t.Name)
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.BaseOffset = -1
			pr.LogAppendTime = -1
			pr.LogStartOffset = -1
			if nerr != nil {
				pr.ErrorCode, pr.ErrorMessage = errorCode(nerr), errorMessage(nerr)
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			end, err := s.producePartition(rc, t, rp.Partition, rp.Records, &pr)
			if err != nil {
				pr.ErrorCode = errorCode(err)
				pr.ErrorMessage = errorMessage(err)
				if leader, epoch, ok := currentLeader(err); ok { // KIP-951
					pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = leader, epoch
				}
				var re *recordErrors
				if errors.As(err, &re) {
					// KIP-467: name each offending record by its index in the batch.
					for _, i := range re.indexes {
						errRec := kmsg.NewProduceResponseTopicPartitionErrorRecord()
						errRec.RelativeOffset = i
						errRec.ErrorMessage = pr.ErrorMessage
						pr.ErrorRecords = append(pr.ErrorRecords, errRec)
					}
				} else if pr.ErrorCode == kerr.InvalidRecord.Code {
					// KIP-467: the batch as a whole is invalid.
					er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
					er.ErrorMessage = pr.ErrorMessage
					pr.ErrorRecords = []kmsg.ProduceResponseTopicPartitionErrorRecord{er}
				}
				rc.conn.log.Debug("produce refused", "topic", rt.Topic, "partition", rp.Partition, "err", err)
			} else {
				maxEnd = max(maxEnd, end)
				if s.opts.Quotas.Active() {
					throttle = max(throttle, s.opts.Quotas.Charge(t.Name, rc.quotaUser(), rc.hdr.ClientID, quota.Produce, len(rp.Records)))
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	resp.ThrottleMillis = int32(throttle / time.Millisecond)
	r := reply{resp: resp, none: req.Acks == 0, throttle: throttle}
	if req.Acks == -1 && maxEnd > 0 {
		timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
		r.await = func() {
			ctx, cancel := context.WithTimeout(rc.ctx(), max(timeout, time.Second))
			defer cancel()
			if err := s.broker.WaitDurable(ctx, maxEnd); err != nil {
				code := errorCode(err)
				for i := range resp.Topics {
					for j := range resp.Topics[i].Partitions {
						if resp.Topics[i].Partitions[j].ErrorCode == 0 {
							resp.Topics[i].Partitions[j].ErrorCode = code
						}
					}
				}
			}
		}
	}
	return r
}

// producePartition appends the batches for one partition and fills pr; it
// returns the log end of what it wrote (for the durability wait).
func (s *Server) producePartition(rc *reqCtx, t *broker.Topic, partition int32, records []byte, pr *kmsg.ProduceResponseTopicPartition) (model.LogPos, error) {
	if partition < 0 || int(partition) >= len(t.Queues) {
		return 0, model.ErrUnknownQueue
	}
	if t.Internal {
		return 0, fmt.Errorf("%w: cannot append to internal topic %s", model.ErrInvalidTopic, rc.kafkaName(t))
	}
	batches, hdrs, err := kbatch.Split(records)
	if err != nil {
		return 0, err
	}
	if max := t.Config.MaxMessageBytes; max > 0 {
		for _, b := range batches {
			if len(b) > int(max) {
				return 0, model.ErrMessageTooLarge
			}
		}
	}
	transactional := hdrs[0].Attributes&kbatch.AttrTransactional != 0
	for _, h := range hdrs {
		if h.Attributes&kbatch.AttrControl != 0 {
			return 0, errClientControlBatch
		}
		if (h.Attributes&kbatch.AttrTransactional != 0) != transactional || (transactional && h.ProducerID < 0) {
			return 0, errMixedTransactional
		}
	}
	logAppend := t.Config.TimestampType == "LogAppendTime"
	now := s.broker.Now().UnixMilli()
	recs := make([]*broker.Record, len(batches))
	for i, b := range batches {
		if logAppend {
			setLogAppendTime(b, now)
			hdrs[i].MaxTimestamp = now
		}
		recs[i] = &broker.Record{Format: model.FormatKafkaBatchV2, Flags: broker.FlagPayloadOffset,
			Count: uint32(hdrs[i].NumRecords), Timestamp: hdrs[i].MaxTimestamp, Payload: b,
			// The batch CRC (verified by kbatch.Split, recomputed by
			// setLogAppendTime) covers b[21:]: storage combines it.
			PayloadTailFrom: kbatch.CRCFrom, PayloadTailCRC: binary.BigEndian.Uint32(b[17:])}
	}
	timers, err := s.scanKeys(batches, recs, t, partition, strings.Contains(t.Config.CleanupPolicy, "compact"))
	if err != nil {
		return 0, err
	}
	queue := t.Queues[partition]
	pid := hdrs[0].ProducerID
	if timers && !transactional {
		return s.produceTimers(rc, t, partition, batches, hdrs, pr)
	}
	if pid >= 0 {
		return s.produceIdempotent(rc, t, partition, queue, recs, hdrs, pr, logAppend, now)
	}
	if err := s.broker.Append(rc.ctx(), t.Name, partition, recs, broker.AppendOptions{NoWait: true}); err != nil {
		return 0, err
	}
	fillProduced(pr, recs, logAppend, now)
	return recs[len(recs)-1].Pos + model.LogPos(recs[len(recs)-1].Size), nil
}

func fillProduced(pr *kmsg.ProduceResponseTopicPartition, recs []*broker.Record, logAppend bool, now int64) {
	pr.BaseOffset = int64(recs[0].BaseOffset)
	if logAppend {
		pr.LogAppendTime = now
	}
}

// produceIdempotent checks each batch's sequence against the producer's
// state, skips retried duplicates, and records what it wrote.
func (s *Server) produceIdempotent(rc *reqCtx, t *broker.Topic, partition int32, queue model.QueueID, recs []*broker.Record,
	hdrs []kbatch.Header, pr *kmsg.ProduceResponseTopicPartition, logAppend bool, now int64) (model.LogPos, error) {
	pid := hdrs[0].ProducerID
	transactional := hdrs[0].Attributes&kbatch.AttrTransactional != 0
	if transactional {
		if s.txns == nil {
			return 0, errNoTxnCoordinator
		}
		if err := s.txns.Verify(pid, hdrs[0].ProducerEpoch, queue); err != nil {
			return 0, err
		}
	}
	st := s.producers.Acquire(queue, pid)
	defer st.Unlock()
	var toWrite []*broker.Record
	var toHdr []kbatch.Header
	dupOffset := model.QueueOffset(-1)
	for i, h := range hdrs {
		if h.ProducerID != pid {
			return 0, &kbatch.Error{Reason: "batches of several producers in one partition"}
		}
		off, dup, err := st.Check(h.ProducerEpoch, h.BaseSequence, h.LastSequence())
		if err != nil {
			return 0, err
		}
		if dup {
			if i == 0 {
				dupOffset = off
			}
			continue
		}
		toWrite = append(toWrite, recs[i])
		toHdr = append(toHdr, h)
	}
	if len(toWrite) == 0 {
		pr.BaseOffset = int64(dupOffset)
		return 0, nil
	}
	var provisional model.QueueOffset
	opened := false
	if transactional {
		// Known to the index before it can be read: the last stable offset
		// stays at or below the batch (corrected once its offset is known).
		var err error
		if _, _, provisional, err = s.broker.Offsets(t.Name, partition); err != nil {
			return 0, err
		}
		opened = s.txnIndex.Begin(queue, pid, provisional)
	}
	if err := s.broker.Append(rc.ctx(), t.Name, partition, toWrite, broker.AppendOptions{NoWait: true}); err != nil {
		if opened {
			s.txnIndex.Unbegin(queue, pid)
		}
		return 0, err
	}
	if opened {
		s.txnIndex.Placed(queue, pid, provisional, toWrite[0].BaseOffset)
	}
	for i, r := range toWrite {
		h := toHdr[i]
		st.Record(producers.Batch{Epoch: h.ProducerEpoch, FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), BaseOffset: r.BaseOffset}, r.StoreTime)
	}
	fillProduced(pr, toWrite, logAppend, now)
	if dupOffset >= 0 {
		pr.BaseOffset = int64(dupOffset)
	}
	last := toWrite[len(toWrite)-1]
	return last.Pos + model.LogPos(last.Size), nil
}

// Key index limits for Kafka records: longer keys are not indexed, and a
// batch indexes keys up to a total size (the keys are stored beside it).
const (
	maxIndexedKeyLen   = 512
	maxIndexedKeyBytes = 64 << 10
)

// timerMarker starts every timer header name (TIMER_DELIVER_MS,
// TIMER_DELAY_SEC, TIMER_DELAY_MS): batches without it anywhere have none.
var timerMarker = []byte("TIMER_")

// scanKeys decodes each batch once to put its record keys into the key
// index (so RocketMQ's QUERY_MESSAGE finds a Kafka record by its key) and,
// for compacted topics, to refuse records without a key, naming each one.
// It reports whether a batch may carry timer headers.
func (s *Server) scanKeys(batches [][]byte, recs []*broker.Record, t *broker.Topic, partition int32, compacted bool) (bool, error) {
	var bad []int32
	timers := false
	for bi, b := range batches {
		i, size := int32(0), 0
		var keys []broker.Key
		var arena []byte
		found, err := s.batches.RecordsFind(b, false, timerMarker, func(r *kbatch.Record) bool {
			if r.KeyNull {
				bad = append(bad, i)
			} else if n := len(r.Key); n > 0 && n <= maxIndexedKeyLen && size+n <= maxIndexedKeyBytes {
				size += n
				arena = append(arena, r.Key...)
				keys = append(keys, broker.Key{Delta: uint32(r.OffsetDelta), Key: arena[len(arena)-n : len(arena) : len(arena)]})
			}
			i++
			return true
		})
		if err != nil {
			return false, &kbatch.Error{Reason: err.Error(), Corrupt: true}
		}
		timers = timers || found
		if len(keys) > 0 {
			// The arena may have moved while growing: point keys at its final bytes.
			at := 0
			for k := range keys {
				n := len(keys[k].Key)
				keys[k].Key = arena[at : at+n : at+n]
				at += n
			}
			recs[bi].Keys = keys
		}
	}
	if !compacted || len(bad) == 0 {
		return timers, nil
	}
	return false, &recordErrors{indexes: bad,
		msg: fmt.Sprintf("compacted topic cannot accept a record without a key in topic partition %s-%d", t.Name.Short(), partition)}
}

// recordErrors refuses a partition's records, naming the offending ones
// (INVALID_RECORD with KIP-467 record errors).
type recordErrors struct {
	indexes []int32
	msg     string
}

func (e *recordErrors) Error() string { return e.msg }

// setLogAppendTime stamps a batch with the broker's time, as Kafka does for
// LogAppendTime topics, and recomputes its CRC.
func setLogAppendTime(b []byte, now int64) {
	attrs := binary.BigEndian.Uint16(b[21:]) | kbatch.AttrLogAppendTime
	binary.BigEndian.PutUint16(b[21:], attrs)
	binary.BigEndian.PutUint64(b[35:], uint64(now))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[kbatch.CRCFrom:], kbatch.CRC32C))
}

var (
	errClientControlBatch = &kafkaCodeError{code: kerr.InvalidRecord.Code, msg: "control batches are written by the broker only"}
	errMixedTransactional = &kafkaCodeError{code: kerr.InvalidRecord.Code, msg: "transactional and non-transactional batches mixed, or a transactional batch without a producer id"}
)

// kafkaCodeError carries a Kafka code decided by a handler.
type kafkaCodeError struct {
	code int16
	msg  string
}

func (e *kafkaCodeError) Error() string { return e.msg }
