package mqtt

import (
	"context"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
	"github.com/rosettamq/rosetta/internal/mqtt/topic"
)

// Sessions and retained messages in the durable state (store.go): what
// the server writes when, and how it brings them back at start.

// positionCommitEvery is how often a session's places in queues are
// recorded while it is connected.
const positionCommitEvery = time.Second

// Open loads the durable state — retained messages, and sessions that
// outlive their connections, which wait for their clients again — and
// keeps it from then on (RunState snapshots it).
func (s *Server) Open(ctx context.Context) error {
	st, err := openStore(ctx, s.b)
	if err != nil {
		return err
	}
	s.store = st
	for _, r := range st.st.retainedAt() {
		p := r.publish()
		s.retained.m[r.Topic] = &retainedMessage{publish: p, client: r.Client}
	}
	now := time.Now().UnixMilli()
	for client, im := range st.st.sessionsAt() {
		left := time.Duration(im.expiry) * time.Second
		if !im.connected && im.at > 0 {
			left -= time.Duration(now-im.at) * time.Millisecond
		}
		if im.expiry <= 0 || left <= 0 {
			if err := st.write(ctx, []*stateRecord{{Kind: "drop", Client: client}}, nil, true); err != nil {
				return err
			}
			continue
		}
		ss := newSession(s, client)
		ss.persisted, ss.expiry = true, time.Duration(im.expiry)*time.Second
		ss.since = 1 // (subscribed before: topics made since are read from their start)
		for _, sub := range im.subs {
			p := packet.Subscription{Filter: sub.Filter, QoS: sub.QoS, NoLocal: sub.NoLocal, RetainAsPublished: sub.RAP, RetainHandling: sub.RH}
			if _, f, shared, _ := topic.Shared(sub.Filter); shared {
				ss.shared[sub.Filter] = &sharedSub{subscription: subscription{Subscription: p, id: sub.ID}, group: popGroup(sub.Filter), filter: f}
			} else {
				ss.subs[sub.Filter] = &subscription{Subscription: p, id: sub.ID}
			}
		}
		ss.positions = im.positions
		ss.qos2In = im.inbound
		for _, o := range im.outbound {
			id, q, off := o.ID, model.QueueID(o.Queue), model.QueueOffset(o.Offset)
			if ss.skip == nil {
				ss.skip = map[model.QueueID]map[model.QueueOffset]bool{}
			}
			if ss.skip[q] == nil {
				ss.skip[q] = map[model.QueueOffset]bool{}
			}
			ss.skip[q][off] = true // sent at QoS 2 already: a replay leaves it out
			if !o.Done {
				ss.inflight[id] = &outbound{queue: q, offset: off, released: o.Released, restored: true}
			}
		}
		s.sessions[client] = ss
		ss.expirer = time.AfterFunc(left, ss.expire)
	}
	if n := len(s.sessions); n > 0 {
		s.log.Info("mqtt sessions restored", "sessions", n, "retained", len(s.retained.m))
	}
	s.releaseOrphanedShares(ctx)
	s.restoreWills()
	return nil
}

// releaseOrphanedShares gives back what the restored sessions' shared
// subscriptions had out when the state was last served (a crash, or the
// group's previous leader): no connection holds those messages now, so
// they go to the members at once rather than when their leases end.
func (s *Server) releaseOrphanedShares(ctx context.Context) {
	p := s.opts.Pop
	if p == nil {
		return
	}
	groups := map[string]string{} // POP group → filter
	for _, ss := range s.sessions {
		for _, sh := range ss.shared {
			groups[sh.group] = sh.filter
		}
	}
	released := 0
	for group, filter := range groups {
		for _, t := range s.topicsOf(filter) {
			for _, q := range t.Queues {
				held, err := p.Leases(group, q)
				if err != nil {
					continue
				}
				for _, h := range held {
					if _, err := p.ChangeInvisible(ctx, group, h, 0); err == nil {
						released++
					}
				}
			}
		}
	}
	if released > 0 {
		s.log.Info("mqtt: shared subscriptions' messages out before the restart given back", "messages", released)
	}
}

// RunState snapshots the durable state on cadence until ctx ends.
func (s *Server) RunState(ctx context.Context) {
	if s.store != nil {
		s.store.log.Run(ctx, snapshotEvery)
	}
}

// storedSubs are the session's subscriptions as recorded (ss.mu held).
func (ss *session) storedSubsLocked() []storedSub {
	out := make([]storedSub, 0, len(ss.subs)+len(ss.shared))
	add := func(sub *subscription) {
		out = append(out, storedSub{Filter: sub.Filter, QoS: sub.QoS, NoLocal: sub.NoLocal, RAP: sub.RetainAsPublished,
			RH: sub.RetainHandling, ID: sub.id})
	}
	for _, sub := range ss.subs {
		add(sub)
	}
	for _, sh := range ss.shared {
		add(&sh.subscription)
	}
	return out
}

// save records the session — its expiry, subscriptions and whether its
// client is connected — when it outlives its connection; a fresh one
// replaces whatever was recorded under its client identifier. A session
// that no longer outlives its connection is dropped from the record.
func (ss *session) save(ctx context.Context, fresh bool) error {
	s := ss.s.store
	if s == nil {
		return nil
	}
	recorded := fresh && s.st.has(ss.clientID) // (an old session under the identifier)
	ss.mu.Lock()
	var recs []*stateRecord
	switch {
	case ss.expiry > 0:
		if recorded {
			recs = append(recs, &stateRecord{Kind: "drop", Client: ss.clientID})
		}
		r := &stateRecord{Kind: "session", Client: ss.clientID, Expiry: int64(ss.expiry / time.Second), Connected: ss.conn != nil,
			Subs: ss.storedSubsLocked()}
		if ss.conn == nil {
			r.At = time.Now().UnixMilli()
		}
		recs = append(recs, r)
		ss.persisted = true
	case ss.persisted || recorded:
		recs = append(recs, &stateRecord{Kind: "drop", Client: ss.clientID})
		ss.persisted = false
	}
	ss.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	return s.write(ctx, recs, nil, false)
}

// drop removes the session from the record.
func (ss *session) drop() {
	ss.mu.Lock()
	was := ss.persisted
	ss.persisted = false
	ss.mu.Unlock()
	if was && ss.s.store != nil {
		if err := ss.s.store.write(context.Background(), []*stateRecord{{Kind: "drop", Client: ss.clientID}}, nil, true); err != nil {
			ss.s.log.Warn("mqtt: dropping a session's record", "client", ss.clientID, "err", err)
		}
	}
}

// commitPositions records the session's places in its queues — never
// past a QoS 1 message in flight, which must come again after a crash.
// now asks for it whatever the time since the last one.
func (ss *session) commitPositions(ctx context.Context, now bool) {
	s := ss.s.store
	if s == nil {
		return
	}
	ss.mu.Lock()
	if !ss.persisted || !ss.posDirty || (!now && time.Since(ss.posCommitted) < positionCommitEvery) {
		ss.mu.Unlock()
		return
	}
	pos := make(map[model.QueueID]model.QueueOffset, len(ss.positions))
	for q, off := range ss.positions {
		pos[q] = off
	}
	for _, o := range ss.inflight {
		if o.publish.QoS == 1 && o.handle == nil {
			if cur, ok := pos[o.queue]; ok && o.offset < cur {
				pos[o.queue] = o.offset
			}
		}
	}
	ss.posDirty, ss.posCommitted = false, time.Now()
	ss.mu.Unlock()
	if err := s.write(ctx, []*stateRecord{{Kind: "pos", Client: ss.clientID, Positions: encodePositions(pos)}}, nil, !now); err != nil {
		ss.s.log.Warn("mqtt: recording a session's places", "client", ss.clientID, "err", err)
	}
}

// recordOut2 records an outbound QoS 2 message before it is sent (once
// durable: the client may have it from then on).
func (ss *session) recordOut2(ctx context.Context, id uint16, o *outbound) error {
	if ss.s.store == nil || !ss.isPersisted() {
		return nil
	}
	return ss.s.store.write(ctx, []*stateRecord{{Kind: "out2", Client: ss.clientID, PacketID: id,
		Out: &storedOut{Queue: uint64(o.queue), Offset: int64(o.offset)}}}, nil, false)
}

// noteOut2 records an outbound QoS 2 message's progress. Released (PUBREC
// came) is recorded before the PUBREL goes: after a crash the PUBREL goes
// again, never the PUBLISH, which a client that completed the exchange
// would take for a new message. Done (PUBCOMP) does not wait: losing it
// only sends a PUBREL again.
func (ss *session) noteOut2(id uint16, o *outbound, released, done bool) {
	if ss.s.store == nil || !ss.isPersisted() || o.publish.QoS != 2 && !o.restored {
		return
	}
	out := &storedOut{Queue: uint64(o.queue), Offset: int64(o.offset), Released: released, Done: done}
	if err := ss.s.store.write(context.Background(), []*stateRecord{{Kind: "out2", Client: ss.clientID, PacketID: id, Out: out}}, nil, done); err != nil {
		ss.s.log.Warn("mqtt: recording a QoS 2 delivery", "client", ss.clientID, "err", err)
	}
}

func (ss *session) isPersisted() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.persisted
}

// noteIn2Released records that an inbound QoS 2 packet identifier was
// released (PUBREL), before PUBCOMP goes: a client that had it may use the
// identifier again at once, and a mark left over from before a crash would
// take its next message for a duplicate.
func (ss *session) noteIn2Released(id uint16) {
	if ss.s.store == nil || !ss.isPersisted() {
		return
	}
	if err := ss.s.store.write(context.Background(), []*stateRecord{{Kind: "in2", Client: ss.clientID, PacketID: id}}, nil, false); err != nil {
		ss.s.log.Warn("mqtt: recording a PUBREL", "client", ss.clientID, "err", err)
	}
}

// storeQoS2 stores a QoS 2 publish of a session that outlives its
// connection together with the mark of its packet identifier, in one
// append: both survive a crash, or neither.
func (s *Server) storeQoS2(ctx context.Context, principal security.Principal, host string, ss *session, p *packet.Publish) error {
	name := s.opts.Mapping.TopicOf(p.Topic)
	if sec := s.opts.Security; sec != nil && sec.AuthorizationEnabled() &&
		!sec.Authorize(principal, host, security.ResourceTopic, name.Short(), security.OpWrite) {
		return errNotAuthorized
	}
	if err := s.keepRetained(ctx, ss.clientID, p); err != nil {
		return err
	}
	t, err := s.b.EnsureTopic(ctx, name)
	if err != nil {
		return err
	}
	index := queueFor(p.Topic, len(t.Queues))
	q, ok := t.Queue(index)
	if !ok || t.Away(index) {
		return model.ErrUnknownQueue
	}
	batch, err := s.batches.Build(kbatch.CodecNone, []kbatch.NewRecord{publishRecord(p, ss.clientID, time.Now().UnixMilli())})
	if err != nil {
		return err
	}
	rec, err := produce.Record(batch)
	if err != nil {
		return err
	}
	rec.Queue = q
	if err := s.store.write(ctx, []*stateRecord{{Kind: "in2", Client: ss.clientID, PacketID: p.PacketID, Set: true}}, []*broker.Record{rec}, false); err != nil {
		return err
	}
	s.traceProduced(t, index, rec.BaseOffset, ss.clientID, p)
	return nil
}

// keepRetained keeps a retained publish (an empty one clears the topic's),
// recorded before it is answered.
func (s *Server) keepRetained(ctx context.Context, client string, p *packet.Publish) error {
	if !p.Retain {
		return nil
	}
	if s.store != nil {
		if err := s.store.write(ctx, []*stateRecord{{Kind: "retain", Retained: retainedRecord(p, client)}}, nil, false); err != nil {
			return err
		}
	}
	s.retained.set(p, client)
	return nil
}

// readPublish reads a stored message back as the PUBLISH a session gets
// (a restored QoS 2 message in flight, sent again).
func (ss *session) readPublish(c *conn, q model.QueueID, off model.QueueOffset) (packet.Publish, bool) {
	w := watchedQueue{queue: q}
	if ref, err := ss.s.b.QueueByID(q); err == nil {
		w.topic = ref.Topic.Name
	} else if w, err = ss.s.remote.locate(q); err != nil {
		return packet.Publish{}, false
	}
	var out packet.Publish
	found := false
	_, _ = ss.s.eachMessage(c.ctx, w, off, 1, func(sm *broker.StoredMessage) bool {
		if sm.Offset != off {
			return false
		}
		msg := messageOf(w.topic, &sm.Message)
		out = packet.Publish{Topic: msg.topic, QoS: 2, Payload: append([]byte(nil), msg.payload...)}
		if c.version == packet.V5 {
			out.Props = msg.props
		}
		found = true
		return false
	})
	return out, found
}
