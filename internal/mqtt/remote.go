package mqtt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// In a cluster, MQTT is served by group 0's leader, whose broker holds its
// group's queues; a topic's other queues (a Kafka topic spread over the
// groups) are read from their groups' leaders through the broker's
// Elsewhere calls. One goroutine per such queue waits there for new
// records and wakes the sessions reading it, so a thousand sessions
// reading a queue cost one remote wait, not a thousand.

// remoteQueues reads and follows queues of other replication groups.
type remoteQueues struct {
	els broker.Elsewhere // nil: a single node, every queue is local
	b   *broker.Broker
	mu  sync.Mutex
	// tails are the queues followed, by storage id.
	tails map[model.QueueID]*remoteTail
}

// remoteTail is one followed queue: its group, the last stable offset
// seen and the sessions' wake channels.
type remoteTail struct {
	group   model.GroupID
	stable  model.QueueOffset
	known   bool
	waiters map[chan struct{}]struct{}
}

// remoteRetry is how long a failed remote call waits before the next (a
// group electing a leader).
const remoteRetry = 500 * time.Millisecond

// queuesOf are t's queues held by other groups: their topic index and
// current group.
func (r *remoteQueues) queuesOf(t *broker.Topic) []watchedQueue {
	if r.els == nil || len(t.All) == len(t.Queues) {
		return nil
	}
	own := r.b.Placement().Group
	local := make(map[model.QueueID]bool, len(t.Queues)+len(t.Guests))
	for _, q := range t.Queues {
		local[q] = true
	}
	for _, q := range t.Guests {
		local[q] = true
	}
	var out []watchedQueue
	for i, q := range t.All {
		if g := t.GroupOf(i); !local[q] && g != own {
			out = append(out, watchedQueue{topic: t.Name, index: int32(i), queue: q, group: g, remote: true})
		}
	}
	return out
}

// offsets are a remote queue's start and last stable offset.
func (r *remoteQueues) offsets(ctx context.Context, w watchedQueue) (start, stable model.QueueOffset, err error) {
	start, _, _, stable, err = r.els.Offsets(ctx, w.group, w.queue)
	return start, stable, err
}

// each calls fn for the messages of a remote queue from offset (at most
// maxRecords records), as broker.EachMessage does for local ones.
func (r *remoteQueues) each(ctx context.Context, w watchedQueue, from model.QueueOffset, maxRecords int, fn func(*broker.StoredMessage) bool) (model.QueueOffset, error) {
	_, stable, err := r.offsets(ctx, w)
	if err != nil || from >= stable {
		return from, err
	}
	return r.b.EachMessageElsewhere(ctx, w.group, w.queue, from, stable, maxRecords, fn)
}

// locate finds a queue of another group by its storage id (a restored
// QoS 2 message's).
func (r *remoteQueues) locate(q model.QueueID) (watchedQueue, error) {
	if r.els != nil {
		for _, t := range r.b.Topics(false) {
			for _, w := range r.queuesOf(t) {
				if w.queue == q {
					return w, nil
				}
			}
		}
	}
	return watchedQueue{}, fmt.Errorf("%w: queue %d", model.ErrUnknownQueue, q)
}

// watch wakes wake when remote queue w has records past pos (at once if
// it is known to).
func (r *remoteQueues) watch(ctx context.Context, w watchedQueue, pos model.QueueOffset, wake chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tails == nil {
		r.tails = map[model.QueueID]*remoteTail{}
	}
	t := r.tails[w.queue]
	if t == nil {
		t = &remoteTail{group: w.group, waiters: map[chan struct{}]struct{}{}}
		r.tails[w.queue] = t
		go r.follow(ctx, w, t)
	}
	t.waiters[wake] = struct{}{}
	if t.known && t.stable > pos {
		poke(wake)
	}
}

// unwatch stops waking wake for queue q.
func (r *remoteQueues) unwatch(q model.QueueID, wake chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.tails[q]; t != nil {
		delete(t.waiters, wake)
	}
}

// follow waits for a remote queue's new records and wakes its sessions,
// until none reads it or ctx (the server's life) ends.
func (r *remoteQueues) follow(ctx context.Context, w watchedQueue, t *remoteTail) {
	for {
		r.mu.Lock()
		if len(t.waiters) == 0 || ctx.Err() != nil {
			delete(r.tails, w.queue)
			r.mu.Unlock()
			return
		}
		known, last := t.known, t.stable
		r.mu.Unlock()
		var err error
		if known {
			err = r.els.Wait(ctx, w.group, w.queue, last, true)
		}
		var stable model.QueueOffset
		if err == nil {
			_, stable, err = r.offsets(ctx, w)
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(remoteRetry):
			}
			continue
		}
		r.mu.Lock()
		t.known, t.stable = true, stable
		if stable != last {
			for wake := range t.waiters {
				poke(wake)
			}
		}
		r.mu.Unlock()
	}
}

// poke wakes a session's dispatcher (a wake already pending will do).
func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// remotePatience bounds a dispatcher's wait while it reads remote queues
// (should a wake-up be missed while a group changes leaders).
const remotePatience = 5 * time.Second

// eachMessage reads a watched queue, local or remote.
func (s *Server) eachMessage(ctx context.Context, w watchedQueue, from model.QueueOffset, maxRecords int, fn func(*broker.StoredMessage) bool) (model.QueueOffset, error) {
	if w.remote {
		return s.remote.each(ctx, w, from, maxRecords, fn)
	}
	return s.b.EachMessage(w.queue, from, maxRecords, fn)
}

// followRemote makes the remote queues given (and no others) wake the
// session's dispatcher when they have records past its places; nil stops
// them all.
func (ss *session) followRemote(ctx context.Context, queues []watchedQueue) {
	r := ss.s.remote
	want := make(map[model.QueueID]bool, len(queues))
	for _, w := range queues {
		want[w.queue] = true
	}
	for q := range ss.remoteWatched {
		if !want[q] {
			r.unwatch(q, ss.wake)
			delete(ss.remoteWatched, q)
		}
	}
	for _, w := range queues {
		ss.mu.Lock()
		pos := ss.positions[w.queue]
		ss.mu.Unlock()
		if ss.remoteWatched == nil {
			ss.remoteWatched = map[model.QueueID]bool{}
		}
		ss.remoteWatched[w.queue] = true
		r.watch(ss.s.life, w, pos, ss.wake)
	}
}
