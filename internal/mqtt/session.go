package mqtt

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
	"github.com/rosettamq/rosetta/internal/mqtt/topic"
)

// A session's subscriptions are delivered by reading the queues of the
// topics they cover, each from the session's place in it: a session that
// subscribes starts at each queue's end, one that comes back resumes
// where it stopped, so what was published while it was away (or while it
// was slower than the publishers) is read from the log, not queued in
// memory. One dispatcher goroutine per connected session reads, matches
// each message against the session's filters and sends it at the highest
// QoS of the filters it matches (capped by the message's), QoS 1 and 2
// messages within the client's receive maximum. Messages sent and not yet
// acknowledged are kept for the session: they go again (DUP) when it
// comes back.

// subscription is one of a session's topic filters.
type subscription struct {
	packet.Subscription
	id int // MQTT 5 subscription identifier (0: none)
}

// watchedQueue is a queue the session reads.
type watchedQueue struct {
	topic model.TopicName
	index int32
	queue model.QueueID
	// remote: a queue of another replication group (remoteQueues).
	group   model.GroupID
	remote  bool
	created int64 // its topic's creation time (unix ms)
	// t is the topic, global the queue's index in it (its Kafka
	// partition), for the message trace.
	t      *broker.Topic
	global int32
}

// outbound is a QoS 1 or 2 message sent and not yet acknowledged.
type outbound struct {
	publish  packet.Publish
	released bool // QoS 2: PUBREC came, PUBREL sent
	// Where the message is stored; restored: brought back from the
	// durable state, its PUBLISH read again before it is sent.
	queue    model.QueueID
	offset   model.QueueOffset
	restored bool
	// A shared subscription's message: its POP handle and group.
	handle *pop.Handle
	group  string
}

type session struct {
	s        *Server
	clientID string

	mu        sync.Mutex
	conn      *conn
	subs      map[string]*subscription
	shared    map[string]*sharedSub // by the whole $share/<name>/<filter>
	since     int64                 // when the session first subscribed (unix ms): later topics are read from their start
	positions map[model.QueueID]model.QueueOffset
	watched   []watchedQueue
	refresh   bool   // the subscriptions changed: which queues to read is worked out again
	topicsVer uint64 // the broker's topics version the watched queues were worked out at
	expiry    time.Duration
	expirer   *time.Timer
	willTimer *time.Timer
	qos2In    map[uint16]bool
	inflight  map[uint16]*outbound
	nextID    uint16
	wake      chan struct{}
	cancel    context.CancelFunc
	done      chan struct{}
	// persisted: the session is in the durable state; posDirty: its
	// places moved since they were last recorded (at posCommitted).
	persisted    bool
	posDirty     bool
	posCommitted time.Time
	// skip: messages sent at QoS 2 before a restart, above the recorded
	// places the session resumed from (never sent twice).
	skip map[model.QueueID]map[model.QueueOffset]bool
	// remoteWatched: the remote queues whose new records wake the
	// dispatcher (its goroutine's own).
	remoteWatched map[model.QueueID]bool
}

func newSession(s *Server, clientID string) *session {
	return &session{s: s, clientID: clientID, subs: map[string]*subscription{}, shared: map[string]*sharedSub{},
		positions: map[model.QueueID]model.QueueOffset{},
		qos2In:    map[uint16]bool{}, inflight: map[uint16]*outbound{}, wake: make(chan struct{}, 1)}
}

// attach gives the session to a connection. It returns the connection
// that had it (nil for none) and stop, which ends the dispatcher that
// served that one (call it once that connection is closing).
func (ss *session) attach(c *conn) (prev *conn, stop func()) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	prev = ss.conn
	ss.conn = c
	cancel, done := ss.cancel, ss.done
	ss.cancel, ss.done = nil, nil
	if ss.expirer != nil {
		ss.expirer.Stop()
		ss.expirer = nil
	}
	if ss.willTimer != nil {
		ss.willTimer.Stop() // a will delayed is not sent when the session comes back
		ss.willTimer = nil
	}
	return prev, func() {
		if cancel != nil {
			cancel()
			<-done
		}
	}
}

// resume sends again what was in flight and starts delivering, unless
// another connection took the session meanwhile.
func (ss *session) resume(c *conn) {
	ss.mu.Lock()
	if ss.conn != c {
		ss.mu.Unlock()
		return
	}
	ids := make([]uint16, 0, len(ss.inflight))
	for id := range ss.inflight {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var again []packet.Packet
	var gone []uint16
	for _, id := range ids {
		o := ss.inflight[id]
		if o.released {
			again = append(again, &packet.Ack{Kind: packet.PUBREL, PacketID: id})
			continue
		}
		if o.restored && o.publish.Topic == "" {
			p, ok := ss.readPublish(c, o.queue, o.offset)
			if !ok {
				gone = append(gone, id) // (removed by retention meanwhile)
				continue
			}
			p.PacketID = id
			o.publish = p
		}
		p := o.publish
		p.Dup = true
		again = append(again, &p)
	}
	for _, id := range gone {
		delete(ss.inflight, id)
	}
	ss.mu.Unlock()
	for _, p := range again {
		c.write(p, false)
	}
	c.flush()
	ss.startDispatcher()
}

// detach ends a connection's hold on the session: a session that does not
// outlive its connection goes, another waits for its client until it
// expires.
func (ss *session) detach(c *conn) {
	ss.mu.Lock()
	if ss.conn != c {
		ss.mu.Unlock()
		return
	}
	ss.conn = nil
	cancel, done := ss.cancel, ss.done
	ss.cancel, ss.done = nil, nil
	expiry := ss.expiry
	if expiry > 0 {
		ss.expirer = time.AfterFunc(expiry, func() { ss.expire() })
	}
	ss.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	ss.releaseShared()
	if expiry <= 0 {
		ss.drop()
		ss.s.dropSession(ss)
		return
	}
	ss.commitPositions(context.Background(), true)
	if err := ss.save(context.Background(), false); err != nil {
		ss.s.log.Warn("mqtt: recording a session", "client", ss.clientID, "err", err)
	}
}

// expire drops a session its client did not come back to in time (a will
// still delayed goes now).
func (ss *session) expire() {
	ss.mu.Lock()
	if ss.conn != nil {
		ss.mu.Unlock()
		return
	}
	will := ss.willTimer
	ss.willTimer = nil
	ss.mu.Unlock()
	if will != nil && will.Stop() {
		will.Reset(0)
	}
	ss.drop()
	ss.s.dropSession(ss)
}

func (ss *session) stopExpiry() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.expirer != nil {
		ss.expirer.Stop()
		ss.expirer = nil
	}
}

// setExpiry sets how long the session outlives its connection.
func (ss *session) setExpiry(d, most time.Duration) {
	ss.mu.Lock()
	ss.expiry = min(d, most)
	ss.mu.Unlock()
}

// expiryOr is the session's expiry, or d when it has none.
func (ss *session) expiryOr(d time.Duration) time.Duration {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.expiry > 0 {
		return ss.expiry
	}
	return d
}

// scheduleWill sends a will after d unless the session comes back.
func (ss *session) scheduleWill(d time.Duration, fn func()) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.conn != nil {
		return
	}
	ss.willTimer = time.AfterFunc(d, fn)
}

// qos2Pending reports whether an inbound QoS 2 packet identifier awaits
// PUBREL.
func (ss *session) qos2Pending(id uint16) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.qos2In[id]
}

// setQoS2Pending marks or clears an inbound QoS 2 packet identifier; it
// reports whether it was marked.
func (ss *session) setQoS2Pending(id uint16, on bool) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	was := ss.qos2In[id]
	if on {
		ss.qos2In[id] = true
	} else {
		delete(ss.qos2In, id)
	}
	return was
}

// acked takes the client's acknowledgement of a message sent to it.
func (ss *session) acked(a *packet.Ack) error {
	ss.mu.Lock()
	o := ss.inflight[a.PacketID]
	c := ss.conn
	var reply packet.Packet
	var done *outbound
	released := false
	switch a.Kind {
	case packet.PUBACK, packet.PUBCOMP:
		delete(ss.inflight, a.PacketID)
		done = o
	case packet.PUBREC:
		switch {
		case o == nil:
			rel := &packet.Ack{Kind: packet.PUBREL, PacketID: a.PacketID}
			if c != nil && c.version == packet.V5 {
				rel.Code = codeIDNotFound
			}
			reply = rel
		case a.Code >= 0x80: // the client refused it: done
			delete(ss.inflight, a.PacketID)
			done = o
		default:
			o.released, released = true, true
			o.publish.Payload = nil
			reply = &packet.Ack{Kind: packet.PUBREL, PacketID: a.PacketID}
		}
	}
	ss.mu.Unlock()
	if done != nil {
		ss.ackShared(done)
		ss.noteOut2(a.PacketID, done, false, true)
	} else if released {
		ss.noteOut2(a.PacketID, o, true, false) // (before the PUBREL)
	}
	if reply != nil && c != nil {
		c.send(reply)
	}
	ss.poke()
	return nil
}

func (ss *session) poke() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// subscribe adds or replaces filters; it reports which were new.
func (ss *session) subscribe(subs []*subscription) []bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.since == 0 {
		ss.since = time.Now().UnixMilli()
	}
	isNew := make([]bool, len(subs))
	for i, sub := range subs {
		if _, f, shared, _ := topic.Shared(sub.Filter); shared {
			_, had := ss.shared[sub.Filter]
			isNew[i] = !had
			ss.shared[sub.Filter] = &sharedSub{subscription: *sub, group: popGroup(sub.Filter), filter: f}
			continue
		}
		_, had := ss.subs[sub.Filter]
		isNew[i] = !had
		ss.subs[sub.Filter] = sub
	}
	ss.refresh = true
	return isNew
}

// unsubscribe drops filters; it reports which existed.
func (ss *session) unsubscribe(filters []string) []bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	had := make([]bool, len(filters))
	for i, f := range filters {
		_, plain := ss.subs[f]
		_, shared := ss.shared[f]
		had[i] = plain || shared
		delete(ss.subs, f)
		delete(ss.shared, f)
	}
	ss.refresh = true
	return had
}

// startDispatcher starts delivering while the session has a connection
// and subscriptions.
func (ss *session) startDispatcher() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.cancel != nil || ss.conn == nil || len(ss.subs)+len(ss.shared) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(ss.conn.ctx)
	ss.cancel, ss.done = cancel, make(chan struct{})
	done, c := ss.done, ss.conn
	go func() {
		defer close(done)
		ss.dispatch(ctx, c)
	}()
}

// dispatch delivers until ctx ends.
func (ss *session) dispatch(ctx context.Context, c *conn) {
	b := ss.s.b
	defer ss.followRemote(ctx, nil)
	for ctx.Err() == nil {
		watched, subs, shared := ss.plan(ctx)
		sent := 0
		for _, w := range watched {
			n, full := ss.deliverQueue(c, w, subs)
			sent += n
			if full {
				break
			}
		}
		sent += ss.deliverShared(ctx, c, shared)
		c.flush()
		ss.commitPositions(ctx, false)
		if sent > 0 {
			continue
		}
		watches := make([]broker.Watch, 0, len(watched))
		ss.mu.Lock()
		full := ss.windowFullLocked(c)
		var remote []watchedQueue
		for _, w := range watched {
			if w.remote {
				remote = append(remote, w)
				continue
			}
			watches = append(watches, broker.Watch{Topic: w.topic, Index: w.index, Offset: ss.positions[w.queue], Stable: true})
		}
		ss.mu.Unlock()
		patience := time.Minute
		if len(remote) > 0 {
			ss.followRemote(ctx, remote)
			patience = remotePatience
		}
		// Shared subscriptions: new messages, or (checked each second)
		// ones other members gave back.
		for _, sh := range shared {
			patience = time.Second
			for _, t := range ss.s.topicsOf(sh.filter) {
				for i := range t.Queues {
					if _, hw, _, err := b.Offsets(t.Name, int32(i)); err == nil {
						watches = append(watches, broker.Watch{Topic: t.Name, Index: int32(i), Offset: hw, Stable: true})
					}
				}
			}
		}
		if full || len(watches) == 0 {
			watches = nil // (only an ack, a subscription or a new topic wakes it)
		}
		wait(ctx, b, ss.wake, ss.s.topicsChanged(), patience, watches)
	}
}

// plan is the queues to read and the subscriptions, worked out again
// when the subscriptions or the broker's topics changed; a queue the
// session has no place in yet gets one (its end, as of now).
func (ss *session) plan(ctx context.Context) ([]watchedQueue, []*subscription, []*sharedSub) {
	watched, subs, shared, unplaced := ss.planLocked()
	// Where the session starts in other groups' queues: asked of their
	// leaders outside the lock (tried again at the next plan on failure).
	for _, w := range unplaced {
		start, stable, err := ss.s.remote.offsets(ctx, w)
		ss.mu.Lock()
		if err != nil {
			ss.refresh = true
		} else if _, ok := ss.positions[w.queue]; !ok {
			ss.positions[w.queue] = stable
			if w.created >= ss.since {
				ss.positions[w.queue] = start
			}
		}
		ss.mu.Unlock()
	}
	return watched, subs, shared
}

// planLocked works out the queues to read (and the remote ones the session
// has no place in yet) under the session's lock.
func (ss *session) planLocked() (watched []watchedQueue, subs []*subscription, shared []*sharedSub, unplaced []watchedQueue) {
	b := ss.s.b
	ver := b.TopicsVersion()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	subs = make([]*subscription, 0, len(ss.subs))
	for _, sub := range ss.subs {
		subs = append(subs, sub)
	}
	shared = make([]*sharedSub, 0, len(ss.shared))
	for _, sh := range ss.shared {
		shared = append(shared, sh)
	}
	if !ss.refresh && ver == ss.topicsVer {
		return ss.watched, subs, shared, nil
	}
	ss.refresh, ss.topicsVer = false, ver
	names := map[model.TopicName]bool{}
	all := false
	for _, sub := range subs {
		t, any := ss.s.opts.Mapping.TopicsOf(sub.Filter)
		if any {
			all = true
			break
		}
		names[t] = true
	}
	var topics []*broker.Topic
	if all {
		topics = b.Topics(false)
	} else {
		for n := range names {
			if t, err := b.Topic(n); err == nil {
				topics = append(topics, t)
			}
		}
	}
	keep := map[model.QueueID]bool{}
	for _, t := range topics {
		for _, w := range ss.s.remote.queuesOf(t) {
			w.created, w.t, w.global = t.CreatedMs, t, w.index
			watched = append(watched, w)
			keep[w.queue] = true
			if _, ok := ss.positions[w.queue]; !ok {
				unplaced = append(unplaced, w)
			}
		}
		for i, q := range t.Queues {
			watched = append(watched, watchedQueue{topic: t.Name, index: int32(i), queue: q, t: t, global: int32(t.GlobalIndex(b.Placement().Group, i))})
			keep[q] = true
			if _, ok := ss.positions[q]; ok {
				continue
			}
			start, hw, _, err := b.Offsets(t.Name, int32(i))
			if err != nil {
				continue
			}
			pos := hw
			if t.CreatedMs >= ss.since {
				pos = start // made after the session subscribed: all of it is new
			}
			ss.positions[q] = pos
		}
	}
	for q := range ss.positions {
		if !keep[q] {
			delete(ss.positions, q)
		}
	}
	ss.watched = watched
	return watched, subs, shared, unplaced
}

// windowFullLocked reports whether as many QoS 1 and 2 messages as the
// client takes are in flight.
func (ss *session) windowFullLocked(c *conn) bool {
	return len(ss.inflight) >= c.receiveMax
}

// deliverQueue sends what a queue holds past the session's place; full
// reports that the client's window filled up.
func (ss *session) deliverQueue(c *conn, w watchedQueue, subs []*subscription) (sent int, full bool) {
	ss.mu.Lock()
	pos, placed := ss.positions[w.queue]
	ss.mu.Unlock()
	if !placed {
		return 0, false
	}
	now := time.Now().UnixMilli()
	stopped := false
	next, err := ss.s.eachMessage(c.ctx, w, pos, 64, func(sm *broker.StoredMessage) bool {
		m := &sm.Message
		if m.Flags&model.FlagCompressedBody != 0 {
			body, err := broker.PlainBody(m)
			if err != nil {
				pos = sm.Offset + 1
				return true
			}
			m.Body = body
		}
		if ss.skipped(w.queue, sm.Offset) {
			pos = sm.Offset + 1
			return true
		}
		msg := messageOf(w.topic, m)
		p, ok := ss.match(c, &msg, subs, now)
		if !ok {
			pos = sm.Offset + 1
			return true
		}
		if p.QoS > 0 {
			ss.mu.Lock()
			if ss.windowFullLocked(c) {
				ss.mu.Unlock()
				stopped, full = true, true
				return false
			}
			p.PacketID = ss.packetIDLocked()
			p.Payload = append([]byte(nil), p.Payload...) // kept until acknowledged
			o := &outbound{publish: *p, queue: w.queue, offset: sm.Offset}
			ss.inflight[p.PacketID] = o
			ss.mu.Unlock()
			if p.QoS == 2 {
				if err := ss.recordOut2(context.Background(), p.PacketID, o); err != nil {
					ss.mu.Lock()
					delete(ss.inflight, p.PacketID)
					ss.mu.Unlock()
					stopped = true
					return false // (tried again next round)
				}
			}
		}
		if c.write(p, false) {
			sent++
			ss.s.traceDelivered(w, sm, ss.clientID, "", p.QoS, 1)
		} else if p.QoS > 0 {
			ss.mu.Lock()
			delete(ss.inflight, p.PacketID) // over the client's maximum packet size: dropped
			ss.mu.Unlock()
		}
		pos = sm.Offset + 1
		return sent < 256
	})
	if err != nil {
		ss.s.log.Debug("mqtt: reading for a session", "client", ss.clientID, "topic", w.topic.String(), "err", err)
		return sent, false
	}
	if !stopped && sent < 256 {
		pos = max(pos, next)
	}
	ss.mu.Lock()
	if old, ok := ss.positions[w.queue]; ok && old != pos {
		ss.positions[w.queue] = pos
		ss.posDirty = true
	}
	ss.mu.Unlock()
	return sent, full
}

// skipped reports (and forgets) a message sent at QoS 2 before a restart.
func (ss *session) skipped(q model.QueueID, off model.QueueOffset) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	m := ss.skip[q]
	if !m[off] {
		return false
	}
	delete(m, off)
	if len(m) == 0 {
		delete(ss.skip, q)
	}
	return true
}

// match turns a message into the PUBLISH the session gets, if any of its
// subscriptions wants it: the highest QoS of those it matches (at most the
// message's), their subscription identifiers, the retain flag kept only
// for retain-as-published ones.
func (ss *session) match(c *conn, m *message, subs []*subscription, now int64) (*packet.Publish, bool) {
	if m.expiry > 0 && m.expiry <= now {
		return nil, false
	}
	var qos byte
	matched, retain := false, false
	var ids []int
	for _, sub := range subs {
		if !topic.Match(sub.Filter, m.topic) || (sub.NoLocal && m.client == ss.clientID) {
			continue
		}
		if !matched || sub.QoS > qos {
			qos = sub.QoS
		}
		matched = true
		retain = retain || (sub.RetainAsPublished && m.retain)
		if sub.id > 0 && !slices.Contains(ids, sub.id) {
			ids = append(ids, sub.id)
		}
	}
	if !matched {
		return nil, false
	}
	p := &packet.Publish{Topic: m.topic, QoS: min(qos, m.qos), Retain: retain, Payload: m.payload}
	if c.version == packet.V5 {
		p.Props = m.props
		p.Props.SubscriptionIDs = ids
		if m.expiry > 0 {
			p.Props.Set(packet.PropMessageExpiry)
			p.Props.MessageExpiry = uint32((m.expiry - now + 999) / 1000)
		}
	}
	return p, true
}

// packetIDLocked picks a packet identifier not in flight.
func (ss *session) packetIDLocked() uint16 {
	for {
		ss.nextID++
		if ss.nextID == 0 {
			ss.nextID = 1
		}
		if _, used := ss.inflight[ss.nextID]; !used {
			return ss.nextID
		}
	}
}

// wait parks until a watched queue has data, the session is poked, the
// broker's topics change or ctx ends.
func wait(ctx context.Context, b *broker.Broker, wake chan struct{}, topics <-chan struct{}, patience time.Duration, watches []broker.Watch) {
	wctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	if len(watches) == 0 {
		select {
		case <-wake:
		case <-topics:
		case <-wctx.Done():
		}
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-wake:
			cancel()
		case <-topics:
			cancel()
		case <-wctx.Done():
		}
	}()
	_ = b.Wait(wctx, watches)
	cancel()
	<-done
}
