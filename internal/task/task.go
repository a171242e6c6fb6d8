// Package task runs the periodic background work of long-lived components
// (flushers, checkpointers, retention) with an owner: every loop belongs to
// a context and a WaitGroup that its owner waits on at shutdown.
package task

import (
	"context"
	"sync"
	"time"
)

// Every runs fn every d until ctx ends, reporting errors to onErr (which may
// be nil). The loop is tracked by wg.
func Every(ctx context.Context, wg *sync.WaitGroup, d time.Duration, fn func(context.Context) error, onErr func(error)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := fn(ctx); err != nil && ctx.Err() == nil && onErr != nil {
					onErr(err)
				}
			}
		}
	}()
}

// Sleep waits d or until ctx ends, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
