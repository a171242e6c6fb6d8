package kafka

// Timer headers on Kafka records: a record carrying TIMER_DELAY_SEC,
// TIMER_DELAY_MS or TIMER_DELIVER_MS (RocketMQ's timer properties, read in
// RocketMQ's order; a DELAY header wins and means no timer) is held in the
// broker's timer store and appended to its partition when due, for
// consumers of every protocol. A batch holding one is stored record by
// record as messages (key, value, headers, timestamp kept): records not
// due later are appended at once, in order, and scheduled ones when due,
// with the offset they get then. The produce answer's base offset is the
// partition's end at the time for a batch whose records were all
// scheduled. Idempotent batches keep their sequence bookkeeping, so a
// retried batch is not scheduled twice. Transactional batches are stored
// as sent (their timer headers are not acted on).

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/model"
)

var errIllegalTimer = &kafkaCodeError{code: kerr.InvalidRecord.Code, msg: "timer header out of range"}

// produceTimers stores batches that may hold timer records.
func (s *Server) produceTimers(rc *reqCtx, t *broker.Topic, partition int32, batches [][]byte, hdrs []kbatch.Header,
	pr *kmsg.ProduceResponseTopicPartition) (model.LogPos, error) {
	queue := t.Queues[partition]
	var st *producers.State
	if pid := hdrs[0].ProducerID; pid >= 0 {
		st = s.producers.Acquire(queue, pid)
		defer st.Unlock()
	}
	now := s.broker.Now()
	pr.BaseOffset = -1
	for i, b := range batches {
		h := hdrs[i]
		if st != nil {
			off, dup, err := st.Check(h.ProducerEpoch, h.BaseSequence, h.LastSequence())
			if err != nil {
				return 0, err
			}
			if dup {
				if pr.BaseOffset < 0 {
					pr.BaseOffset = int64(off)
				}
				continue
			}
		}
		base, err := s.appendTimerBatch(rc, t, partition, b, now)
		if err != nil {
			return 0, err
		}
		if pr.BaseOffset < 0 {
			pr.BaseOffset = int64(base)
		}
		if st != nil {
			st.Record(producers.Batch{Epoch: h.ProducerEpoch, FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), BaseOffset: base}, now.UnixMilli())
		}
	}
	return 0, nil // appended durably already
}

// appendTimerBatch appends one batch's records as messages, scheduling the
// timer ones; it returns the offset of its first record appended now (the
// partition's end when all were scheduled).
func (s *Server) appendTimerBatch(rc *reqCtx, t *broker.Topic, partition int32, batch []byte, now time.Time) (model.QueueOffset, error) {
	type item struct {
		msg model.Message
		due int64 // 0: now
	}
	var items []item
	var illegal error
	err := s.batches.Records(batch, true, func(r *kbatch.Record) bool {
		m := model.Message{Body: append([]byte(nil), r.Value...), BornTime: r.Timestamp}
		if !r.KeyNull {
			m.Key = append([]byte(nil), r.Key...)
		}
		for _, h := range r.Headers {
			if h.Key == tagsHeader {
				m.Tags = string(h.Value)
				continue
			}
			m.Headers = append(m.Headers, model.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
		}
		due, ok, err := broker.TimerDeliverAt(&m, now)
		if err != nil {
			illegal = err
			return false
		}
		if !ok || due <= now.UnixMilli() {
			due = 0
		}
		items = append(items, item{msg: m, due: due})
		return true
	})
	if err != nil {
		return 0, &kbatch.Error{Reason: err.Error(), Corrupt: true}
	}
	if illegal != nil {
		return 0, &kafkaCodeError{code: errIllegalTimer.code, msg: illegal.Error()}
	}
	_, _, base, err := s.broker.Offsets(t.Name, partition)
	if err != nil {
		return 0, err
	}
	first := model.QueueOffset(-1)
	var run []model.Message
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		offs, err := s.broker.AppendMessages(rc.ctx(), t.Name, partition, run)
		if err == nil && first < 0 {
			first = offs[0]
		}
		run = run[:0]
		return err
	}
	for _, it := range items {
		if it.due == 0 {
			run = append(run, it.msg)
			continue
		}
		if err := flush(); err != nil {
			return 0, err
		}
		if _, _, err := s.broker.AppendTimer(rc.ctx(), t.Name, partition, it.msg, it.due); err != nil {
			if errors.Is(err, broker.ErrTimerIllegal) {
				return 0, &kafkaCodeError{code: errIllegalTimer.code, msg: err.Error()}
			}
			return 0, err
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	if first < 0 {
		first = base
	}
	return first, nil
}
