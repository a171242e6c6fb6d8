package mqtt

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
	"github.com/rosettamq/rosetta/internal/mqtt/topic"
)

// Shared subscriptions ($share/<name>/<filter>) consume through the POP
// engine: the group is the subscription ($share/<name>/<filter>), each
// message matching the filter is handed to one member session at a time
// and done when that member acknowledges it (QoS 0: when sent). What a
// member holds when its connection ends goes back to the group at once,
// and to the others; what members held when the broker crashed (or
// group 0's leader changed) goes back when the sessions are restored.

// shareLease is how long a member may hold a message unacknowledged
// before it goes to another.
const shareLease = 60 * time.Second

// sharedSub is one of a session's shared subscriptions.
type sharedSub struct {
	subscription
	group  string // the POP group: the whole $share/<name>/<filter>
	filter string // the filter within
}

// popGroup is the POP group of a shared subscription.
func popGroup(shared string) string { return shared }

// deliverShared hands the session what its shared subscriptions get, as
// far as its window allows; it reports how many it sent.
func (ss *session) deliverShared(ctx context.Context, c *conn, shared []*sharedSub) int {
	p := ss.s.opts.Pop
	if p == nil {
		return 0
	}
	sent := 0
	for _, sh := range shared {
		ss.mu.Lock()
		free := c.receiveMax - len(ss.inflight)
		ss.mu.Unlock()
		if free <= 0 {
			break
		}
		for _, t := range ss.s.topicsOf(sh.filter) {
			sent += ss.receiveShared(ctx, c, sh, t, min(free, 16)) // (small takes spread messages over members)
		}
	}
	return sent
}

// receiveShared hands the session what a shared subscription gets from
// one topic, at most max messages.
func (ss *session) receiveShared(ctx context.Context, c *conn, sh *sharedSub, t *broker.Topic, max int) int {
	p := ss.s.opts.Pop
	short := t.Name.Short()
	got, err := p.Receive(ctx, sh.group, t.Queues, max, shareLease, false, func(m *model.Message) bool {
		name := mqttTopicOf(m)
		if name == "" {
			name = short // another protocol's record
		}
		return topic.Match(sh.filter, name)
	})
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, model.ErrNotLeader) {
			ss.s.log.Warn("mqtt: receiving for a shared subscription", "group", sh.group, "err", err)
		}
		return 0
	}
	sent := 0
	now := time.Now().UnixMilli()
	for i := range got {
		d := &got[i]
		msg := messageOf(t.Name, &d.Message)
		if msg.expiry > 0 && msg.expiry <= now {
			_ = p.Ack(ctx, sh.group, d.Handle)
			continue
		}
		out := &packet.Publish{Topic: msg.topic, QoS: min(sh.QoS, msg.qos), Payload: msg.payload}
		if c.version == packet.V5 {
			out.Props = msg.props
			if sh.id > 0 {
				out.Props.SubscriptionIDs = []int{sh.id}
			}
		}
		ss.s.traceShared(t, d, ss.clientID, sh.group, out.QoS)
		if out.QoS == 0 {
			c.write(out, false)
			if err := p.Ack(ctx, sh.group, d.Handle); err != nil && !errors.Is(err, pop.ErrStaleHandle) {
				ss.s.log.Warn("mqtt: acknowledging a shared message", "group", sh.group, "err", err)
			}
			sent++
			continue
		}
		ss.mu.Lock()
		out.PacketID = ss.packetIDLocked()
		h := d.Handle
		ss.inflight[out.PacketID] = &outbound{publish: *out, handle: &h, group: sh.group}
		ss.mu.Unlock()
		c.write(out, false)
		sent++
	}
	return sent
}

// releaseShared gives the shared subscriptions' messages in flight back
// to their groups (the connection ended): the other members get them.
func (ss *session) releaseShared() {
	p := ss.s.opts.Pop
	if p == nil {
		return
	}
	ss.mu.Lock()
	var back []*outbound
	for id, o := range ss.inflight {
		if o.handle != nil {
			back = append(back, o)
			delete(ss.inflight, id)
		}
	}
	ss.mu.Unlock()
	for _, o := range back {
		if _, err := p.ChangeInvisible(context.Background(), o.group, *o.handle, 0); err != nil && !errors.Is(err, pop.ErrStaleHandle) {
			ss.s.log.Warn("mqtt: giving back a shared message", "group", o.group, "err", err)
		}
	}
}

// ackShared marks a shared message done.
func (ss *session) ackShared(o *outbound) {
	if o.handle == nil {
		return
	}
	if err := ss.s.opts.Pop.Ack(context.Background(), o.group, *o.handle); err != nil && !errors.Is(err, pop.ErrStaleHandle) {
		ss.s.log.Warn("mqtt: acknowledging a shared message", "group", o.group, "err", err)
	}
}

// topicsOf lists the topics a filter's names are stored in.
func (s *Server) topicsOf(filter string) []*broker.Topic {
	name, all := s.opts.Mapping.TopicsOf(filter)
	if all {
		return s.b.Topics(false)
	}
	if t, err := s.b.Topic(name); err == nil {
		return []*broker.Topic{t}
	}
	return nil
}

// mqttTopicOf is a stored message's MQTT topic name (its header; ""
// for another protocol's record, which a filter then matches by its
// topic's name — see messageOf).
func mqttTopicOf(m *model.Message) string {
	for _, h := range m.Headers {
		if h.Key == HeaderTopic {
			return string(h.Value)
		}
	}
	return ""
}

// traceShared records a shared subscription's message sent to a member
// in the message trace (when its topic is traced).
func (s *Server) traceShared(t *broker.Topic, d *pop.Delivery, client, group string, qos byte) {
	if !s.b.Traced(t, "") {
		return
	}
	index := slices.Index(t.Queues, d.Queue)
	if index < 0 {
		return
	}
	w := watchedQueue{t: t, global: int32(t.GlobalIndex(s.b.Placement().Group, index))}
	s.traceDelivered(w, &broker.StoredMessage{Offset: d.Offset, StoreTime: d.StoreTime, Message: d.Message}, client, group, qos, d.Attempt)
}
