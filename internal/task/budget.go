package task

import (
	"sync"
	"time"
)

// ByteBudget bounds the request bytes the front-ends hold at once: a
// reader takes a frame's announced size before reading it and gives it
// back once the request is handled, so a flood of large or slow requests
// meets back-pressure rather than exhausting memory. One budget may be
// shared by several protocols' servers.
type ByteBudget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	avail int64
}

// NewByteBudget returns a budget of n bytes.
func NewByteBudget(n int64) *ByteBudget {
	b := &ByteBudget{avail: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Acquire blocks until n bytes are free, or done is closed (false).
func (b *ByteBudget) Acquire(n int64, done <-chan struct{}) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.avail < n {
		select {
		case <-done:
			return false
		default:
		}
		// Wait at most 50 ms at a time, so a closed done is noticed.
		t := time.AfterFunc(50*time.Millisecond, b.cond.Broadcast)
		b.cond.Wait()
		t.Stop()
	}
	b.avail -= n
	return true
}

// Release gives n bytes back.
func (b *ByteBudget) Release(n int64) {
	b.mu.Lock()
	b.avail += n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// Available reports the bytes free now.
func (b *ByteBudget) Available() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.avail
}
