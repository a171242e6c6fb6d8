package remoting

// Client registry: HEART_BEAT (34), UNREGISTER_CLIENT (35),
// GET_CONSUMER_LIST_BY_GROUP (38), CHECK_CLIENT_CONFIG (46). Heartbeats
// register producer and consumer groups per client id with their
// subscriptions (pulls without a subscription use them); a clustering
// consumer's retry topic %RETRY%<group> is created on its first heartbeat.
// When a group's members change, the other members are told with a one-way
// NOTIFY_CONSUMER_IDS_CHANGED so they rebalance at once (the client that
// joined or left is not told: it rebalances by itself). Clients vanish with
// their connection or after two minutes without a heartbeat.

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/filter"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// clientTimeout drops a client that has not sent a heartbeat for this long
// (RocketMQ's channel expiry).
const clientTimeout = 2 * time.Minute

// subscription is one topic a consumer subscribes to.
type subscription struct {
	Topic      string `json:"topic"`
	SubString  string `json:"subString"`
	Expression string `json:"expressionType"`
	SubVersion int64  `json:"subVersion"`
}

type consumerData struct {
	GroupName        string         `json:"groupName"`
	ConsumeType      string         `json:"consumeType"`
	MessageModel     string         `json:"messageModel"`
	ConsumeFromWhere string         `json:"consumeFromWhere"`
	Subscriptions    []subscription `json:"subscriptionDataSet"`
}

type heartbeatData struct {
	ClientID  string `json:"clientID"`
	Producers []struct {
		GroupName string `json:"groupName"`
	} `json:"producerDataSet"`
	Consumers []consumerData `json:"consumerDataSet"`
}

// client is one registered client of a group.
type client struct {
	id       string
	conn     *conn
	lastSeen time.Time
	data     consumerData
	language string
	version  int32
}

// registry holds the groups' clients.
type registry struct {
	mu        sync.Mutex
	consumers map[string]map[string]*client // group → client id → client
	producers map[string]map[string]*client
	// requesters maps the client ids of request-reply requesters to the
	// connection their request came on (a requester may not have sent a
	// heartbeat yet when the reply arrives).
	requesters map[string]*conn
}

func newRegistry() *registry {
	return &registry{consumers: map[string]map[string]*client{}, producers: map[string]map[string]*client{},
		requesters: map[string]*conn{}}
}

// register records a client in a group; it reports whether the group's
// membership changed.
func (r *registry) register(groups map[string]map[string]*client, group string, cl *client) bool {
	m := groups[group]
	if m == nil {
		m = map[string]*client{}
		groups[group] = m
	}
	old, ok := m[cl.id]
	m[cl.id] = cl
	return !ok || old.conn != cl.conn
}

// subscriptionOf returns a group's registered subscription to a topic.
func (r *registry) subscriptionOf(group, topic string) (subscription, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cl := range r.consumers[group] {
		for _, s := range cl.data.Subscriptions {
			if s.Topic == topic {
				return s, true
			}
		}
	}
	return subscription{}, false
}

// consumerIDs lists a group's live client ids, sorted.
func (r *registry) consumerIDs(group string, now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := []string{}
	for id, cl := range r.consumers[group] {
		if now.Sub(cl.lastSeen) < clientTimeout {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// dropConn removes every client of a closed connection and returns the
// consumer groups that lost members.
func (r *registry) dropConn(c *conn) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var changed []string
	for group, m := range r.consumers {
		for id, cl := range m {
			if cl.conn == c {
				delete(m, id)
				changed = append(changed, group)
			}
		}
	}
	for _, m := range r.producers {
		for id, cl := range m {
			if cl.conn == c {
				delete(m, id)
			}
		}
	}
	for id, rc := range r.requesters {
		if rc == c {
			delete(r.requesters, id)
		}
	}
	return changed
}

// members returns the connections of a group's clients.
func (r *registry) members(group string) []*conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*conn
	for _, cl := range r.consumers[group] {
		out = append(out, cl.conn)
	}
	return out
}

// producerConns returns the connections of a producer group's live clients.
func (r *registry) producerConns(group string) []*conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*conn
	for _, cl := range r.producers[group] {
		if cl.conn.ctx != nil && cl.conn.ctx.Err() == nil {
			out = append(out, cl.conn)
		}
	}
	return out
}

// connOf returns the connection of a registered client by id (nil when it
// is not connected).
func (r *registry) connOf(clientID string) *conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.requesters[clientID]; ok {
		return c
	}
	for _, groups := range []map[string]map[string]*client{r.producers, r.consumers} {
		for _, m := range groups {
			if cl, ok := m[clientID]; ok {
				return cl.conn
			}
		}
	}
	return nil
}

// addRequester records the connection a requester's request came on.
func (r *registry) addRequester(clientID string, c *conn) {
	r.mu.Lock()
	if r.requesters[clientID] != c {
		r.requesters[clientID] = c
	}
	r.mu.Unlock()
}

// notifyChanged tells a group's members that its membership changed, all
// but the connection that changed it (a joining client rebalances on its
// own; telling it too only races with its start-up).
func (s *Server) notifyChanged(group string, except *conn) {
	for _, c := range s.clients.members(group) {
		if c == except {
			continue
		}
		c.sendOneway(&protocol.Command{Code: protocol.NotifyConsumerIDsChanged, Language: "GO", Version: protocol.Version,
			ExtFields: protocol.Pairs("consumerGroup", group)})
	}
}

func handleHeartbeat(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	var hb heartbeatData
	if err := json.Unmarshal(req.Body, &hb); err != nil {
		return protocol.NewResponse(req, protocol.SystemError, "heartbeat body: "+err.Error())
	}
	now := time.Now()
	var changed []string
	s.clients.mu.Lock()
	for _, p := range hb.Producers {
		s.clients.register(s.clients.producers, p.GroupName, &client{id: hb.ClientID, conn: rc.conn, lastSeen: now})
	}
	for _, cd := range hb.Consumers {
		if s.clients.register(s.clients.consumers, cd.GroupName, &client{id: hb.ClientID, conn: rc.conn, lastSeen: now, data: cd,
			language: req.Language, version: req.Version}) {
			changed = append(changed, cd.GroupName)
		}
	}
	s.clients.mu.Unlock()
	for _, cd := range hb.Consumers {
		if cd.MessageModel != "BROADCASTING" {
			if _, err := s.broker.EnsureRetryTopic(rc.ctx, cd.GroupName); err != nil {
				s.log.Debug("retry topic not created", "group", cd.GroupName, "err", err)
			}
		}
	}
	for _, g := range changed {
		s.notifyChanged(g, rc.conn)
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	return resp
}

// ensureTopic creates a group's system topic (retry, dead letter) with n
// queues if it is missing, and returns its name.
func (s *Server) ensureTopic(rc *reqCtx, topic string, n int) (model.TopicName, error) {
	name, err := topicName(topic)
	if err != nil {
		return name, err
	}
	_, err = s.broker.GetOrCreateTopic(rc.ctx, name, n, broker.TopicConfig{})
	return name, err
}

func handleUnregisterClient(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	id := req.Ext("clientID")
	var changed string
	s.clients.mu.Lock()
	if g := req.Ext("consumerGroup"); g != "" {
		if _, ok := s.clients.consumers[g][id]; ok {
			delete(s.clients.consumers[g], id)
			changed = g
		}
	}
	if g := req.Ext("producerGroup"); g != "" {
		delete(s.clients.producers[g], id)
	}
	s.clients.mu.Unlock()
	if changed != "" {
		s.notifyChanged(changed, rc.conn)
	}
	return protocol.NewResponse(req, protocol.Success, "")
}

func handleGetConsumerList(rc *reqCtx, req *protocol.Command) *protocol.Command {
	ids := rc.conn.s.clients.consumerIDs(req.Ext("consumerGroup"), time.Now())
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body, _ = json.Marshal(map[string][]string{"consumerIdList": ids})
	return resp
}

func handleCheckClientConfig(_ *reqCtx, req *protocol.Command) *protocol.Command {
	return protocol.NewResponse(req, protocol.Success, "")
}

// msgFilter decides which messages a subscription receives.
type msgFilter interface{ match(m *model.Message) bool }

// tagFilter is a parsed TAG subscription ("*" or "A || B").
type tagFilter map[string]bool

// parseTagFilter parses a tag expression; nil matches everything.
func parseTagFilter(expr string) tagFilter { return filter.TagSet(expr) }

// match reports whether a message passes.
func (f tagFilter) match(m *model.Message) bool { return f == nil || f[m.Tags] }

// tagSkipper returns a test of stored tag hashes that no subscribed tag has,
// so pulls skip those messages from the queue index without reading them
// (nil when the filter is not a tag list). Messages whose hash matches are
// still checked by match: hashes may collide.
func tagSkipper(f msgFilter) func(uint64) bool {
	tf, ok := f.(tagFilter)
	if !ok || tf == nil {
		return nil
	}
	hashes := make([]uint64, 0, len(tf))
	for t := range tf {
		hashes = append(hashes, broker.TagHash(t))
	}
	return func(h uint64) bool {
		for _, x := range hashes {
			if x == h {
				return false
			}
		}
		return true
	}
}

// sqlFilter is a SQL92 subscription evaluated on the message's properties.
type sqlFilter struct{ expr *filter.Expr }

func (f sqlFilter) match(m *model.Message) bool { return f.expr.Match(filter.MessageProperties(m)) }

// subscriptionFilter compiles a subscription of either type, caching SQL
// expressions.
func (s *Server) subscriptionFilter(typ, expr string) (msgFilter, error) {
	if !strings.EqualFold(typ, "SQL92") {
		return parseTagFilter(expr), nil
	}
	s.sqlMu.Lock()
	defer s.sqlMu.Unlock()
	if e, ok := s.sqlCache[expr]; ok {
		return sqlFilter{e}, nil
	}
	e, err := filter.Compile(expr)
	if err != nil {
		return nil, err
	}
	if s.sqlCache == nil || len(s.sqlCache) >= 4096 {
		s.sqlCache = map[string]*filter.Expr{}
	}
	s.sqlCache[expr] = e
	return sqlFilter{e}, nil
}

// Consumer is a live remoting consumer of a group, as its heartbeats
// describe it.
type Consumer struct {
	ClientID, Address, Language string
	Version                     int32
	ConsumeType, MessageModel   string
	// Subscriptions are "topic expression" (e.g. "orders TAG:a || b").
	Subscriptions []string
	LastSeen      time.Time
}

// Consumers lists the live consumers of group (by client id).
func (s *Server) Consumers(group string) []Consumer {
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	var out []Consumer
	for id, cl := range s.clients.consumers[group] {
		c := Consumer{ClientID: id, Address: cl.conn.remote, Language: cl.language, Version: cl.version,
			ConsumeType: cl.data.ConsumeType, MessageModel: cl.data.MessageModel, LastSeen: cl.lastSeen}
		for _, sub := range cl.data.Subscriptions {
			expr := sub.SubString
			if sub.Expression != "" && sub.Expression != "TAG" {
				expr = sub.Expression + ":" + expr
			}
			c.Subscriptions = append(c.Subscriptions, sub.Topic+" "+expr)
		}
		slices.Sort(c.Subscriptions)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Consumer) int { return strings.Compare(a.ClientID, b.ClientID) })
	return out
}

// ConsumerGroups lists the groups with live remoting consumers.
func (s *Server) ConsumerGroups() []string {
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	var out []string
	for g, members := range s.clients.consumers {
		if len(members) > 0 {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}
