package groups

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrStateNotDurable is returned to a request whose group change could not
// be made durable (the coordinator cannot write, or is closing): the client
// looks for the coordinator again and retries, as after any coordinator
// write failure.
var ErrStateNotDurable = errors.New("group state not durable")

// persister hands changed group images to Options.Persist from one
// goroutine: each group's latest image once, in the order of its changes
// (an image superseded before it was written is never written). Every
// change gets a sequence number, so a request that changed a group can
// wait until an image holding its change is durable (AwaitDurable) before
// it answers: a coordinator that fails over never forgets what a client
// was told (an epoch, an assignment, a generation).
type persister struct {
	mu      sync.Mutex
	last    map[string]string       // the image last handed over, per group
	dirty   map[string]pendingImage // images to write
	wake    chan struct{}           // signalled when dirty gains a group
	stop    context.CancelFunc      // ends the writer (Close)
	done    chan struct{}           // closed when the writer ended
	seq     uint64                  // the last change's number
	noted   map[string]uint64       // per group: its last change's number
	written map[string]uint64       // per group: the last change durable
	failed  map[string]uint64       // per group: the last change whose write failed
	settled chan struct{}           // closed (and replaced) when a write ends
	closed  bool                    // the writer ended: nothing more is written
}

// pendingImage is a group's image waiting for the writer (nil: the group
// is gone) and the number of the change it holds.
type pendingImage struct {
	image []byte
	seq   uint64
}

// startPersist starts the image writer when the coordinator persists.
func (c *Coordinator) startPersist() {
	p := &c.persist
	p.last, p.dirty, p.wake = map[string]string{}, map[string]pendingImage{}, make(chan struct{}, 1)
	p.noted, p.written, p.failed, p.settled = map[string]uint64{}, map[string]uint64{}, map[string]uint64{}, make(chan struct{})
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
	p := &c.persist
	if p.stop != nil {
		p.stop()
		<-p.done
	}
	p.mu.Lock()
	p.closed = true
	p.settleLocked()
	p.mu.Unlock()
}

// settleLocked wakes the requests waiting for a write (p.mu held).
func (p *persister) settleLocked() {
	close(p.settled)
	p.settled = make(chan struct{})
}

// AwaitDurable waits until every change made so far to a group's state is
// durable (at once when nothing is pending, or nothing is persisted). It
// returns ErrStateNotDurable when the write of such a change failed or the
// coordinator closed first, and ctx's error when ctx ends first.
func (c *Coordinator) AwaitDurable(ctx context.Context, group string) error {
	if c.opts.Persist == nil {
		return nil
	}
	p := &c.persist
	p.mu.Lock()
	target := p.noted[group]
	for {
		switch {
		case p.written[group] >= target, p.noted[group] < target:
			// (noted goes below target only when the group's removal,
			// a later change, was written and its entries dropped.)
			p.mu.Unlock()
			return nil
		case p.failed[group] >= target:
			p.mu.Unlock()
			return fmt.Errorf("%w: group %s: its write failed", ErrStateNotDurable, group)
		case p.closed:
			p.mu.Unlock()
			return fmt.Errorf("%w: group %s: the coordinator closed", ErrStateNotDurable, group)
		}
		settled := p.settled
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-settled:
		}
		p.mu.Lock()
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
		image = nil
	case image == nil:
		return
	default:
		if last, ok := p.last[id]; ok && last == string(image) {
			return
		}
		p.last[id] = string(image)
	}
	p.seq++
	p.noted[id] = p.seq
	p.dirty[id] = pendingImage{image: image, seq: p.seq}
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
		p.dirty = map[string]pendingImage{}
		p.mu.Unlock()
		for id, pi := range batch {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.opts.Persist(wctx, id, pi.image)
			cancel()
			if err != nil && ctx.Err() == nil {
				// The group's next change writes it again; a coordinator
				// that can no longer write is about to close.
				c.log.Warn("persisting a group's state failed", "group", id, "err", err)
			}
			p.mu.Lock()
			switch {
			case err != nil:
				p.failed[id] = max(p.failed[id], pi.seq)
			case pi.image == nil && p.noted[id] == pi.seq:
				delete(p.noted, id) // gone and written: nothing to wait for
				delete(p.written, id)
				delete(p.failed, id)
			default:
				p.written[id] = max(p.written[id], pi.seq)
			}
			p.settleLocked()
			p.mu.Unlock()
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
			delete(c.sgroups, id)
			c.groups[id] = g
			g.mu.Lock()
			for _, m := range g.members {
				g.touchLocked(m)
			}
			g.mu.Unlock()
		case d.share != nil:
			g := d.share
			delete(c.groups, id)
			delete(c.cgroups, id)
			c.sgroups[id] = g
			session, _ := c.shareTimeouts(id)
			for _, m := range g.members {
				m.sessionDeadline = now.Add(session)
				c.armShareTimerLocked(g, m)
			}
		case d.consumer != nil:
			g := d.consumer
			delete(c.groups, id)
			delete(c.sgroups, id)
			c.cgroups[id] = g
			for _, m := range g.members {
				m.sessionDeadline = now.Add(c.sessionTimeout(id))
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
