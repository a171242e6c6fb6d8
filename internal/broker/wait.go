package broker

import (
	"context"

	"github.com/rosettamq/rosetta/internal/model"
)

// Watch is one queue position a long poll waits on.
type Watch struct {
	Topic  model.TopicName
	Index  int32
	Offset model.QueueOffset
	// MaxBytes caps what this queue counts towards WaitBytes (the fetch's
	// partition limit); 0 counts any data as enough.
	MaxBytes int
	// Stable waits for data below the last stable offset (read_committed):
	// nothing counts while Offset is at or past it.
	Stable bool
}

// Wait parks until one of the watched queues has data past its offset or ctx
// ends (the caller's long-poll timeout).
func (b *Broker) Wait(ctx context.Context, watches []Watch) error {
	return b.WaitBytes(ctx, watches, 1)
}

// WaitBytes parks until the watched queues together hold at least minBytes
// of visible data past their offsets (each counted up to its MaxBytes), or
// ctx ends. It never polls: appends to a watched queue wake it, and it then
// counts again from the index.
func (b *Broker) WaitBytes(ctx context.Context, watches []Watch, minBytes int) error {
	if local, away := b.splitAway(watches); len(away) > 0 {
		return b.waitAway(ctx, local, away, minBytes)
	}
	ids := make([]model.QueueID, len(watches))
	for i, w := range watches {
		id, _, err := b.QueueID(w.Topic, w.Index)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	waitAt := make(map[model.QueueID]model.QueueOffset, len(watches))
	for {
		total := 0
		for i, w := range watches {
			limit := w.MaxBytes
			if limit <= 0 {
				limit = minBytes
			}
			n, hw, err := b.engine.VisibleBytes(ids[i], w.Offset, limit)
			if err != nil {
				return err
			}
			if w.Stable && w.Offset >= b.LastStable(ids[i], hw) {
				n = 0 // (a transaction's end wakes the queue)
			}
			total += n
			waitAt[ids[i]] = max(hw, w.Offset)
		}
		if total >= minBytes {
			return nil
		}
		if err := b.engine.Wait(ctx, waitAt); err != nil {
			return err
		}
	}
}
