package groups

import (
	"context"
	"sync"
	"time"
)

// persister hands changed group images to Options.Persist from one
// goroutine: each group's latest image once, in the order of its changes
// (an image superseded before it was written is never written).
type persister struct {
	mu    sync.Mutex
	last  map[string]string  // the image last handed over, per group
	dirty map[string][]byte  // images to write; nil: the group is gone
	wake  chan struct{}      // signalled when dirty gains a group
	stop  context.CancelFunc // ends the writer (Close)
	done  chan struct{}      // closed when the writer ended
}

// startPersist starts the image writer when the coordinator persists.
func (c *Coordinator) startPersist() {
	p := &c.persist
	p.last, p.dirty, p.wake = map[string]string{}, map[string][]byte{}, make(chan struct{}, 1)
	if c.opts.Persist == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		c.writeImages(ctx)
	}()
}

// stopPersist ends the writer; images not written yet are dropped (the
// coordinator closes with its term, when nothing can be written anyway).
func (c *Coordinator) stopPersist() {
	if p := &c.persist; p.stop != nil {
		p.stop()
		<-p.done
	}
}

// noteImage records a group's image as changed (gone: the group is gone;
// a nil image otherwise: nothing to persist in the group's state now).
func (c *Coordinator) noteImage(id string, image []byte, gone bool) {
	if c.opts.Persist == nil {
		return
	}
	p := &c.persist
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case gone:
		if _, ok := p.last[id]; !ok {
			return
		}
		delete(p.last, id)
		p.dirty[id] = nil
	case image == nil:
		return
	default:
		if last, ok := p.last[id]; ok && last == string(image) {
			return
		}
		p.last[id] = string(image)
		p.dirty[id] = image
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// writeImages writes changed images until ctx ends.
func (c *Coordinator) writeImages(ctx context.Context) {
	p := &c.persist
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.mu.Lock()
		batch := p.dirty
		p.dirty = map[string][]byte{}
		p.mu.Unlock()
		for id, image := range batch {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.opts.Persist(wctx, id, image)
			cancel()
			if err != nil && ctx.Err() == nil {
				// The group's next change writes it again; a coordinator
				// that can no longer write is about to close.
				c.log.Warn("persisting a group's state failed", "group", id, "err", err)
			}
		}
	}
}

// persistLocked notes a classic group's image (g.mu held).
func (g *group) persistLocked() { g.c.noteImage(g.id, g.imageLocked(), g.state == Dead) }

// persistConsumerLocked notes a consumer group's image (c.mu held).
func (c *Coordinator) persistConsumerLocked(g *consumerGroup) { c.noteImage(g.id, g.image(), false) }

// Restore loads persisted group images (before the coordinator serves):
// classic groups come back in their state with their generation, members
// and assignments, consumer groups with their epochs, members, target and
// current assignments; every member starts a fresh session. An image that
// does not decode is skipped (its group starts empty). It returns how many
// groups it restored and how many it skipped.
func (c *Coordinator) Restore(images map[string][]byte) (restored, skipped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	for id, b := range images {
		d, err := decodeImage(id, b)
		if err != nil {
			c.log.Warn("group state not restored", "group", id, "err", err)
			skipped++
			continue
		}
		switch {
		case d.classic != nil:
			g := d.classic
			g.c = c
			delete(c.cgroups, id)
			c.groups[id] = g
			g.mu.Lock()
			for _, m := range g.members {
				g.touchLocked(m)
			}
			g.mu.Unlock()
		case d.consumer != nil:
			g := d.consumer
			delete(c.groups, id)
			c.cgroups[id] = g
			for _, m := range g.members {
				m.sessionDeadline = now.Add(c.opts.ConsumerSessionTimeout)
				if m.state == stateUnrevoked {
					m.revokeDeadline = now.Add(m.rebalanceTimeout)
				}
				c.armMemberTimerLocked(g, m)
			}
		}
		if c.opts.Persist != nil {
			c.persist.mu.Lock()
			c.persist.last[id] = string(b)
			c.persist.mu.Unlock()
		}
		restored++
	}
	return restored, skipped
}
