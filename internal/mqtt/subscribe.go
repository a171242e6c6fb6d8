package mqtt

import (
	"sort"
	"sync"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
	"github.com/rosettamq/rosetta/internal/mqtt/topic"
)

// SUBACK and UNSUBACK codes.
const (
	subackFailure3        = 0x80
	codeTopicFilterBad    = 0x8F
	codeSharedUnsupported = 0x9E
	codeNoSubscription    = 0x11
)

func (c *conn) handleSubscribe(p *packet.Subscribe) error {
	ack := &packet.Suback{PacketID: p.PacketID, Codes: make([]byte, len(p.Filters))}
	var subs []*subscription
	subID := 0
	if len(p.Props.SubscriptionIDs) > 0 {
		subID = p.Props.SubscriptionIDs[0]
	}
	for i, f := range p.Filters {
		code := c.checkFilter(f.Filter)
		if code != 0 {
			if c.version < packet.V5 {
				code = subackFailure3
			}
			ack.Codes[i] = code
			c.log.Info("mqtt subscription refused", "filter", f.Filter, "code", code)
			continue
		}
		ack.Codes[i] = f.QoS
		subs = append(subs, &subscription{Subscription: f, id: subID})
	}
	isNew := c.session.subscribe(subs)
	// Placed in the queues the filters match before the SUBACK, not when
	// the dispatcher next plans: a message published once the client holds
	// its SUBACK (or published by another client after this SUBSCRIBE
	// arrived) is past the session's place and reaches it.
	c.session.plan(c.ctx)
	if err := c.session.save(c.ctx, false); err != nil {
		return err // (the client sees the connection end, not a SUBACK it could not rely on)
	}
	c.send(ack)
	// Retained messages after the SUBACK: for each filter unless its
	// retain handling says otherwise (1: only a new subscription's).
	for j, sub := range subs {
		if _, _, shared, _ := topic.Shared(sub.Filter); shared || sub.RetainHandling == 2 || (sub.RetainHandling == 1 && !isNew[j]) {
			continue // (no retained messages for shared subscriptions)
		}
		for _, rp := range c.s.retained.matching(sub.Filter) {
			if sub.NoLocal && rp.client == c.session.clientID {
				continue
			}
			out := &packet.Publish{Topic: rp.publish.Topic, QoS: min(rp.publish.QoS, sub.QoS), Retain: true, Payload: rp.publish.Payload}
			if c.version == packet.V5 {
				out.Props = rp.publish.Props
				out.Props.TopicAlias, out.Props.SubscriptionIDs = 0, nil
				if sub.id > 0 {
					out.Props.SubscriptionIDs = []int{sub.id}
				}
			}
			c.session.sendRetained(c, out)
		}
	}
	c.flush()
	c.session.poke()
	c.session.startDispatcher()
	return nil
}

// checkFilter is the failure code for a filter the session may not take
// (0: it may).
func (c *conn) checkFilter(filter string) byte {
	share, inner, shared, err := topic.Shared(filter)
	switch {
	case err != nil:
		return codeTopicFilterBad
	case shared && c.s.opts.Pop == nil:
		return codeSharedUnsupported
	case !shared:
		if err := topic.ValidFilter(filter); err != nil {
			return codeTopicFilterBad
		}
	}
	sec := c.s.opts.Security
	if sec == nil || !sec.AuthorizationEnabled() {
		return 0
	}
	if shared && !sec.Authorize(c.principal, c.host(), security.ResourceGroup, share, security.OpRead) {
		return codeNotAuthorized
	}
	name, all := c.s.opts.Mapping.TopicsOf(inner)
	ok := false
	if all {
		ok = sec.AuthorizeAny(c.principal, c.host(), security.ResourceTopic, security.OpRead)
	} else {
		ok = sec.Authorize(c.principal, c.host(), security.ResourceTopic, name.Short(), security.OpRead)
	}
	if !ok {
		return codeNotAuthorized
	}
	return 0
}

func (c *conn) handleUnsubscribe(p *packet.Unsubscribe) error {
	had := c.session.unsubscribe(p.Filters)
	if err := c.session.save(c.ctx, false); err != nil {
		return err
	}
	ack := &packet.Unsuback{PacketID: p.PacketID}
	if c.version == packet.V5 {
		ack.Codes = make([]byte, len(had))
		for i, h := range had {
			if !h {
				ack.Codes[i] = codeNoSubscription
			}
		}
	}
	c.send(ack)
	c.session.poke()
	return nil
}

// sendRetained sends a retained message to the session (in flight like
// any other when its QoS is above 0; dropped when the window is full).
func (ss *session) sendRetained(c *conn, p *packet.Publish) {
	if p.QoS > 0 {
		ss.mu.Lock()
		if ss.windowFullLocked(c) {
			ss.mu.Unlock()
			return
		}
		p.PacketID = ss.packetIDLocked()
		ss.inflight[p.PacketID] = &outbound{publish: *p}
		ss.mu.Unlock()
	}
	c.write(p, false)
}

// retainedStore keeps each MQTT topic's last retained message.
type retainedStore struct {
	mu sync.Mutex
	m  map[string]*retainedMessage
}

type retainedMessage struct {
	publish packet.Publish
	client  string
}

func newRetainedStore() *retainedStore { return &retainedStore{m: map[string]*retainedMessage{}} }

// set keeps a retained publish (an empty payload clears the topic's).
func (r *retainedStore) set(p *packet.Publish, client string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(p.Payload) == 0 {
		delete(r.m, p.Topic)
		return
	}
	kept := *p
	kept.Payload = append([]byte(nil), p.Payload...)
	kept.PacketID, kept.Dup = 0, false
	kept.Props.TopicAlias = 0
	r.m[p.Topic] = &retainedMessage{publish: kept, client: client}
}

// matching returns the retained messages a filter matches, by topic.
func (r *retainedStore) matching(filter string) []*retainedMessage {
	r.mu.Lock()
	var out []*retainedMessage
	for name, m := range r.m {
		if topic.Match(filter, name) {
			out = append(out, m)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].publish.Topic < out[j].publish.Topic })
	return out
}
