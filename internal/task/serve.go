package task

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// ServeConns accepts connections on l until ctx ends and runs serve for each
// in a goroutine it owns. On the way out it closes the listener and every
// open connection, and waits for all the goroutines.
func ServeConns(ctx context.Context, name string, l net.Listener, serve func(context.Context, net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
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
			serve(ctx, nc)
			mu.Lock()
			delete(conns, nc)
			mu.Unlock()
		}()
	}
	mu.Lock()
	for nc := range conns {
		nc.Close()
	}
	mu.Unlock()
	wg.Wait()
	return err
}
