package task

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ServeConns accepts connections on l until ctx ends and runs serve for each
// in a goroutine it owns. On the way out it closes the listener and every
// open connection, and waits for all the goroutines.
func ServeConns(ctx context.Context, name string, l net.Listener, serve func(context.Context, net.Conn)) error {
	return serveConns(ctx, name, l, 0, serve)
}

// ServeConnsDraining is ServeConns whose connections stop reading when ctx
// ends and have up to grace to answer the requests they already read; then
// their serve context ends and they close. A client whose connection
// closes with its requests unanswered cannot tell what became of them; one
// that got an answer (an error saying where to go, say) can.
func ServeConnsDraining(ctx context.Context, name string, l net.Listener, grace time.Duration, serve func(context.Context, net.Conn)) error {
	return serveConns(ctx, name, l, grace, serve)
}

type drainingKey struct{}

// Draining reports whether the connection this serve context belongs to
// was told to stop reading: a read failing on its deadline then means
// that, not an idle or slow client.
func Draining(ctx context.Context) bool {
	d, ok := ctx.Value(drainingKey{}).(*atomic.Bool)
	return ok && d.Load()
}

func serveConns(ctx context.Context, name string, l net.Listener, grace time.Duration, serve func(context.Context, net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	connCtx, stopConns := ctx, context.CancelFunc(func() {})
	draining := &atomic.Bool{}
	if grace > 0 {
		connCtx, stopConns = context.WithCancel(context.WithValue(context.WithoutCancel(ctx), drainingKey{}, draining))
	}
	defer stopConns()
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
		err   error
	)
	for {
		nc, aerr := l.Accept()
		if aerr != nil {
			if ctx.Err() == nil && !errors.Is(aerr, net.ErrClosed) {
				err = fmt.Errorf("%s accept: %w", name, aerr)
			}
			break
		}
		mu.Lock()
		conns[nc] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(connCtx, nc)
			mu.Lock()
			delete(conns, nc)
			mu.Unlock()
		}()
	}
	if grace > 0 {
		draining.Store(true)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		// Readers re-arm their own deadlines: keep putting them in the
		// past until every connection has answered and closed, or grace
		// runs out.
		end := time.NewTimer(grace)
		tick := time.NewTicker(20 * time.Millisecond)
	drain:
		for {
			mu.Lock()
			for nc := range conns {
				_ = nc.SetReadDeadline(time.Unix(1, 0))
			}
			mu.Unlock()
			select {
			case <-done:
				break drain
			case <-end.C:
				break drain
			case <-tick.C:
			}
		}
		end.Stop()
		tick.Stop()
		stopConns()
	}
	mu.Lock()
	for nc := range conns {
		nc.Close()
	}
	mu.Unlock()
	wg.Wait()
	return err
}
