package grpcv5

// Clients: each client (x-mq-client-id) opens a telemetry stream per
// endpoint and sends its settings there; the registry keeps the settings
// and the stream, so calls can read the settings and the broker can reach
// a producer (transaction recovery) through it.

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/metadata"
)

// client is one connected client.
type client struct {
	id   string
	addr string // the client's address

	sendMu sync.Mutex // gRPC streams take one sender at a time
	stream v2.MessagingService_TelemetryServer

	mu       sync.Mutex
	settings *v2.Settings
}

// send writes a command on the client's telemetry stream.
func (c *client) send(cmd *v2.TelemetryCommand) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(cmd)
}

func (c *client) getSettings() *v2.Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
}

// publishes says whether the client is a producer that declared topic.
func (c *client) publishes(topic string) bool {
	st := c.getSettings()
	if st == nil {
		return false
	}
	for _, t := range st.GetPublishing().GetTopics() {
		if t.GetName() == topic {
			return true
		}
	}
	return false
}

// registry holds the clients with an open telemetry stream.
type registry struct {
	mu      sync.Mutex
	clients map[string]map[*client]bool // client id → its streams
}

func newRegistry() *registry { return &registry{clients: map[string]map[*client]bool{}} }

func (r *registry) add(c *client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.clients[c.id]
	if m == nil {
		m = map[*client]bool{}
		r.clients[c.id] = m
	}
	m[c] = true
}

func (r *registry) remove(c *client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.clients[c.id], c)
	if len(r.clients[c.id]) == 0 {
		delete(r.clients, c.id)
	}
}

// Consumer is a connected consumer as the admin API lists group members.
type Consumer struct {
	ClientID      string
	Address       string
	ClientType    string // SIMPLE_CONSUMER, PUSH_CONSUMER
	Language      string
	Version       string
	Subscriptions []string // "topic expression" (type TAG or SQL92)
}

// consumers returns the clients whose settings subscribe group (every
// group when group is empty), one entry per client id.
func (r *registry) consumers(group string) map[string][]Consumer {
	out := map[string][]Consumer{}
	for _, c := range r.all() {
		sub := c.getSettings().GetSubscription()
		g := sub.GetGroup().GetName()
		if sub == nil || g == "" || group != "" && g != group {
			continue
		}
		dup := false
		for _, have := range out[g] {
			dup = dup || have.ClientID == c.id
		}
		if dup {
			continue
		}
		st := c.getSettings()
		cons := Consumer{ClientID: c.id, Address: c.addr, ClientType: st.GetClientType().String(),
			Language: st.GetUserAgent().GetLanguage().String(), Version: st.GetUserAgent().GetVersion()}
		for _, e := range sub.GetSubscriptions() {
			expr := e.GetExpression().GetExpression()
			if e.GetExpression().GetType() == v2.FilterType_SQL {
				expr = "SQL92:" + expr
			}
			cons.Subscriptions = append(cons.Subscriptions, e.GetTopic().GetName()+" "+expr)
		}
		out[g] = append(out[g], cons)
	}
	return out
}

// Consumers lists the live RocketMQ 5 consumers of group, by client id.
func (s *Server) Consumers(group string) []Consumer {
	out := s.clients.consumers(group)[group]
	for i := range out {
		slices.Sort(out[i].Subscriptions)
	}
	slices.SortFunc(out, func(a, b Consumer) int { return strings.Compare(a.ClientID, b.ClientID) })
	return out
}

// ConsumerGroups lists the groups with live RocketMQ 5 consumers.
func (s *Server) ConsumerGroups() []string {
	out := slices.Collect(maps.Keys(s.clients.consumers("")))
	slices.Sort(out)
	return out
}

// settings returns a client's latest settings (nil when unknown).
func (r *registry) settings(id string) *v2.Settings {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.clients[id] {
		if st := c.getSettings(); st != nil {
			return st
		}
	}
	return nil
}

// all returns every connected client stream.
func (r *registry) all() []*client {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*client
	for _, m := range r.clients {
		for c := range m {
			out = append(out, c)
		}
	}
	return out
}

// connected is the set of client ids with a telemetry stream open.
func (r *registry) connected() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(r.clients))
	for id := range r.clients {
		out[id] = true
	}
	return out
}

// clientID is the x-mq-client-id of a call.
func clientID(ctx context.Context) string {
	// One value, without the copy of every header FromIncomingContext makes.
	if v := metadata.ValueFromIncomingContext(ctx, "x-mq-client-id"); len(v) > 0 {
		return v[0]
	}
	return ""
}
