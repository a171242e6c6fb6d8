package broker

import (
	"context"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
)

// followPrefix applies the metadata store's changes under prefix (made
// through any node) from revision rev until ctx ends; when the watch is
// cut (slow, compacted, or the store's leader lost) it reloads the whole
// prefix (reload returns the revision the reload reflects) and watches on.
func (b *Broker) followPrefix(ctx context.Context, prefix string, rev int64, apply func(meta.Event), reload func(context.Context) (int64, error)) {
	for ctx.Err() == nil {
		for ev := range b.meta.WatchFrom(ctx, prefix, rev) {
			if ev.Compacted {
				break
			}
			rev = ev.Revision
			apply(ev)
		}
		if ctx.Err() != nil {
			return
		}
		var err error
		if rev, err = reload(ctx); err != nil {
			b.log.Warn("reloading metadata", "prefix", prefix, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}
