package pop

import (
	"context"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// ReceiveLive is Receive for consumers: deliveries past the group's
// attempts (its retryMaxTimes plus the first) are moved to the group's
// dead-letter topic and acknowledged instead of handed out, the same for
// every protocol.
func (e *Engine) ReceiveLive(ctx context.Context, group string, queues []model.QueueID, max int, invisible time.Duration, fifo bool, match Filter) ([]Delivery, error) {
	got, err := e.Receive(ctx, group, queues, max, invisible, fifo, match)
	if err != nil || len(got) == 0 {
		return got, err
	}
	limit := e.b.MaxAttempts(group)
	keep := got[:0]
	for i := range got {
		d := &got[i]
		if d.Attempt <= limit {
			keep = append(keep, *d)
			e.b.TraceQueue(ctx, d.Queue, d.Offset, &d.Message, broker.TraceEvent{Kind: broker.TraceDelivered, Group: group, Attempt: d.Attempt})
			continue
		}
		if err := e.DeadLetter(ctx, group, d); err != nil {
			e.log.Warn("dead-lettering failed; the message stays in flight", "group", group, "queue", d.Queue, "offset", d.Offset, "err", err)
		}
	}
	return keep, nil
}

// DeadLetter moves a delivery to the group's dead-letter topic (recording
// its topic and id) and acknowledges it.
func (e *Engine) DeadLetter(ctx context.Context, group string, d *Delivery) error {
	ref, err := e.b.QueueByID(d.Queue)
	if err != nil {
		return err
	}
	m := d.Message
	m.ReconsumeTimes = d.Attempt - 1
	ctx = broker.WithTraceOrigin(ctx, ref.Topic.Name, ref.Index, d.Offset)
	if err := e.b.DeadLetter(ctx, group, &ref.Topic.Name, m); err != nil {
		return err
	}
	e.DeadLettered(group)
	e.log.Info("message moved to the dead-letter topic", "group", group, "topic", ref.Topic.Name.String(), "offset", d.Offset, "attempts", d.Attempt-1)
	return e.ack(ctx, group, d.Handle)
}
