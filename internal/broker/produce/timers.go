package produce

// Timer headers on Kafka records: a record carrying TIMER_DELAY_SEC,
// TIMER_DELAY_MS or TIMER_DELIVER_MS (RocketMQ's timer properties, read in
// RocketMQ's order; a DELAY header wins and means no timer) is held in the
// broker's timer store and appended to its partition when due, for
// consumers of every protocol. A batch holding one is stored record by
// record as messages (key, value, headers, timestamp kept): records not
// due later are appended at once, in order, and scheduled ones when due,
// with the offset they get then. The base offset answered is the
// partition's end at the time for a batch whose records were all
// scheduled. Idempotent batches keep their sequence bookkeeping, so a
// retried batch is not scheduled twice. Transactional batches are stored
// as sent (their timer headers are not acted on).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/model"
)

// appendTimers stores batches that may hold timer records; what it
// appends is durable when it returns. It returns the base offset.
func (a *Appender) appendTimers(ctx context.Context, t *broker.Topic, partition int32, batches [][]byte, hdrs []kbatch.Header) (model.QueueOffset, error) {
	queue, _ := t.Queue(partition)
	var st *producers.State
	if pid := hdrs[0].ProducerID; pid >= 0 {
		st = a.producers.Acquire(queue, pid)
		defer st.Unlock()
	}
	now := a.b.Now()
	base := model.QueueOffset(-1)
	for i, b := range batches {
		h := hdrs[i]
		if st != nil {
			off, dup, err := st.Check(h.ProducerEpoch, h.BaseSequence, h.LastSequence())
			if err != nil {
				return base, err
			}
			if dup {
				if base < 0 {
					base = off
				}
				continue
			}
		}
		first, err := a.appendTimerBatch(ctx, t, partition, b, now)
		if err != nil {
			return base, err
		}
		if base < 0 {
			base = first
		}
		if st != nil {
			st.Record(producers.Batch{Epoch: h.ProducerEpoch, FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), BaseOffset: first}, now.UnixMilli())
		}
	}
	return base, nil
}

// appendTimerBatch appends one batch's records as messages, scheduling the
// timer ones; it returns the offset of its first record appended now (the
// partition's end when all were scheduled).
func (a *Appender) appendTimerBatch(ctx context.Context, t *broker.Topic, partition int32, batch []byte, now time.Time) (model.QueueOffset, error) {
	type item struct {
		msg model.Message
		due int64 // 0: now
	}
	var items []item
	var illegal error
	err := a.batches.Records(batch, true, func(r *kbatch.Record) bool {
		m := broker.KafkaRecordMessage(r).Clone() // r's bytes live only during this call
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
		return 0, fmt.Errorf("%w: %v", ErrIllegalTimer, illegal)
	}
	_, _, end, err := a.b.Offsets(t.Name, partition)
	if err != nil {
		return 0, err
	}
	first := model.QueueOffset(-1)
	var run []model.Message
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		offs, err := a.b.AppendMessages(ctx, t.Name, partition, run)
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
		if _, _, err := a.b.AppendTimer(ctx, t.Name, partition, it.msg, it.due); err != nil {
			if errors.Is(err, broker.ErrTimerIllegal) {
				return 0, fmt.Errorf("%w: %v", ErrIllegalTimer, err)
			}
			return 0, err
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	if first < 0 {
		first = end
	}
	return first, nil
}
