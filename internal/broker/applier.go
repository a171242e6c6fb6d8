package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// queueApplier feeds a state machine from its internal queues: it reads
// each queue in offset order up to the visible end (durable in sync mode,
// written in async mode; the commit index in a cluster) and hands every
// record to apply. It is the one path by which such state changes, at run
// time and when replaying after a restart, so the state is a function of
// the log: a replica applying the same queues ends in the same state.
//
// Writers append a record and then call catchUp to see its effect; a
// record that is not visible yet (a deferred append in sync mode) is
// applied by run once it is.
type queueApplier struct {
	engine *storage.Engine
	queues []model.QueueID
	apply  func(i int, offset model.QueueOffset, payload []byte)

	mu   sync.Mutex          // serialises catch-ups; held around apply
	next []model.QueueOffset // per queue: the next offset to apply
}

func newQueueApplier(e *storage.Engine, queues []model.QueueID, apply func(int, model.QueueOffset, []byte)) *queueApplier {
	return &queueApplier{engine: e, queues: queues, apply: apply, next: make([]model.QueueOffset, len(queues))}
}

// catchUp applies queue i up to its visible end.
func (a *queueApplier) catchUp(i int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.catchUpLocked(i)
}

// catchUpAll applies every queue up to its visible end.
func (a *queueApplier) catchUpAll() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for i := range a.queues {
		errs = append(errs, a.catchUpLocked(i))
	}
	return errors.Join(errs...)
}

func (a *queueApplier) catchUpLocked(i int) error {
	q := a.queues[i]
	for {
		start, hw, _, err := a.engine.Offsets(q)
		if err != nil {
			return err
		}
		if a.next[i] < start {
			// Records below the start are gone: the state they made is
			// carried by a later snapshot record.
			a.next[i] = start
		}
		if a.next[i] >= hw {
			return nil
		}
		res, err := a.engine.Read(q, a.next[i], storage.ReadOptions{MaxBytes: 1 << 20})
		if err != nil {
			return fmt.Errorf("apply queue %d from %d: %w", q, a.next[i], err)
		}
		for _, rec := range res.Records {
			for j := uint32(0); j < rec.Count; j++ {
				off := rec.BaseOffset + model.QueueOffset(j)
				if off < a.next[i] {
					continue
				}
				if rec.Count == 1 {
					a.apply(i, off, rec.Payload)
				}
				a.next[i] = off + 1
			}
		}
		next := res.NextOffset
		res.Release()
		if next > a.next[i] {
			a.next[i] = next
		}
	}
}

// run applies records as they become visible until ctx ends.
func (a *queueApplier) run(ctx context.Context) error {
	for ctx.Err() == nil {
		a.mu.Lock()
		watches := make(map[model.QueueID]model.QueueOffset, len(a.queues))
		for i, q := range a.queues {
			watches[q] = a.next[i]
		}
		a.mu.Unlock()
		if err := a.engine.Wait(ctx, watches); err != nil {
			if ctx.Err() != nil || errors.Is(err, model.ErrClosed) {
				return nil
			}
			return err
		}
		if err := a.catchUpAll(); err != nil {
			return err
		}
	}
	return nil
}
