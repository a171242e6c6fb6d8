package grpcv5

// QueryRoute, Heartbeat, QueryAssignment and NotifyClientTermination.
// Routes list every queue of the topic as readable and writable at this
// node, reached at the endpoints the client asked through (or the
// advertised address), accepting every message type. In a cluster of
// several replication groups (Options.Cluster) each group is a broker
// holding its share of the queues (queue i of the topic in group i mod
// groups), reached at its leader. A topic is created
// on first route query while auto-creation is on, as remoting sends do.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/peer"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

var acceptTypes = []v2.MessageType{v2.MessageType_NORMAL, v2.MessageType_FIFO, v2.MessageType_DELAY, v2.MessageType_TRANSACTION}

// QueryRoute answers a topic's queues.
func (s *Server) QueryRoute(ctx context.Context, req *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	if len(req.GetEndpoints().GetAddresses()) == 0 && s.opts.AdvertisedAddr == "" {
		return &v2.QueryRouteResponse{Status: &v2.Status{Code: v2.Code_ILLEGAL_ACCESS_POINT, Message: "no endpoints"}}, nil
	}
	t, err := s.routeTopic(ctx, req.GetTopic())
	if errors.Is(err, model.ErrNotLeader) {
		t, err = s.routeTopicOnceLeading(ctx, req.GetTopic())
	}
	if err != nil {
		return &v2.QueryRouteResponse{Status: status(err)}, nil
	}
	return &v2.QueryRouteResponse{Status: okStatus(), MessageQueues: s.queues(ctx, req.GetTopic(), t, req.GetEndpoints())}, nil
}

// routeTopic returns the topic a route names, creating it while
// auto-creation is on.
func (s *Server) routeTopic(ctx context.Context, r *v2.Resource) (*broker.Topic, error) {
	name, err := topicName(r)
	if err != nil {
		return nil, err
	}
	t, err := s.broker.EnsureTopic(ctx, name)
	if err == nil && t.Internal {
		return nil, statusErr(v2.Code_ILLEGAL_TOPIC, "topic %s is internal", r.GetName())
	}
	return t, err
}

// routeTopicOnceLeading asks again, for up to leaderMoveWait, for a topic
// whose creation found this member's group not accepting appends: a member
// just elected opens appends once it has applied its log, and a client
// starting then (its first route query creates the topic) would otherwise
// fail to start. It stops waiting when this member's term ends (the
// client's retry then reaches the new leader).
func (s *Server) routeTopicOnceLeading(ctx context.Context, r *v2.Resource) (*broker.Topic, error) {
	var done <-chan struct{}
	if serving := s.serving.Load(); serving != nil {
		done = (*serving).Done()
	}
	deadline := time.NewTimer(leaderMoveWait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-deadline.C:
			return s.routeTopic(ctx, r)
		case <-done:
			return s.routeTopic(ctx, r)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t, err := s.routeTopic(ctx, r)
		if !errors.Is(err, model.ErrNotLeader) {
			return t, err
		}
	}
}

// BrokerRoute is one broker of a cluster as routes name it: its name and
// the addresses that reach it, its leader's first (none while no leader is
// known: its queues are left out). The v5 clients sort the addresses and
// connect to the first that answers; every member relays to the leader, so
// when a member dies they reach another before their next route refresh.
type BrokerRoute struct {
	Name  string
	Addrs []string
}

// queues lists a topic's queues as routes show them.
func (s *Server) queues(ctx context.Context, r *v2.Resource, t *broker.Topic, asked *v2.Endpoints) []*v2.MessageQueue {
	if s.opts.Cluster != nil {
		var remote net.Addr
		if p, ok := peer.FromContext(ctx); ok {
			remote = p.Addr
		}
		return s.clusterQueues(r, t, remote)
	}
	b := &v2.Broker{Name: s.opts.BrokerName, Id: 0, Endpoints: s.endpoints(asked)}
	out := make([]*v2.MessageQueue, t.QueueCount())
	for i := range out {
		out[i] = &v2.MessageQueue{Topic: r, Id: int32(i), Permission: v2.Permission_READ_WRITE, Broker: b, AcceptMessageTypes: acceptTypes}
	}
	return out
}

// clusterQueues lists a topic's queues broker by broker, each numbered
// within its broker.
func (s *Server) clusterQueues(r *v2.Resource, t *broker.Topic, remote net.Addr) []*v2.MessageQueue {
	brokers := s.opts.Cluster(remote)
	var out []*v2.MessageQueue
	for g, br := range brokers {
		if len(br.Addrs) == 0 {
			continue
		}
		b := &v2.Broker{Name: br.Name, Id: 0, Endpoints: addressEndpoints(br.Addrs, nil)}
		n := t.CountIn(model.GroupID(g))
		for i := range n {
			out = append(out, &v2.MessageQueue{Topic: r, Id: int32(i), Permission: v2.Permission_READ_WRITE, Broker: b, AcceptMessageTypes: acceptTypes})
		}
	}
	return out
}

// endpoints is where routes send clients: the advertised address, or the
// endpoints the client asked through.
func (s *Server) endpoints(asked *v2.Endpoints) *v2.Endpoints {
	if s.opts.AdvertisedAddr == "" {
		return asked
	}
	return addressEndpoints([]string{s.opts.AdvertisedAddr}, asked)
}

// addressEndpoints are the endpoints of host:port addresses, with the
// scheme of the first (orElse when none is one).
func addressEndpoints(addrs []string, orElse *v2.Endpoints) *v2.Endpoints {
	var out *v2.Endpoints
	for _, addr := range addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		p, _ := strconv.Atoi(port)
		if out == nil {
			out = &v2.Endpoints{Scheme: v2.AddressScheme_IPv4}
			if ip := net.ParseIP(host); ip == nil {
				out.Scheme = v2.AddressScheme_DOMAIN_NAME
			} else if ip.To4() == nil {
				out.Scheme = v2.AddressScheme_IPv6
			}
		}
		out.Addresses = append(out.Addresses, &v2.Address{Host: host, Port: int32(p)})
	}
	if out == nil {
		return orElse
	}
	return out
}

// QueryAssignment tells a push consumer which queues to receive from: for a
// FIFO group every queue (each is received in order), otherwise one queue
// with id -1 — receive from any queue — as RocketMQ's proxy answers.
func (s *Server) QueryAssignment(ctx context.Context, req *v2.QueryAssignmentRequest) (*v2.QueryAssignmentResponse, error) {
	t, err := s.routeTopic(ctx, req.GetTopic())
	if err != nil {
		return &v2.QueryAssignmentResponse{Status: status(err)}, nil
	}
	qs := s.queues(ctx, req.GetTopic(), t, req.GetEndpoints())
	if !s.groupConfig(req.GetGroup()).ConsumeMessageOrderly {
		// One assignment per broker, receiving from any of its queues.
		var any []*v2.MessageQueue
		seen := map[string]bool{}
		for _, q := range qs {
			if !seen[q.GetBroker().GetName()] {
				seen[q.GetBroker().GetName()] = true
				any = append(any, &v2.MessageQueue{Topic: q.Topic, Id: -1, Permission: q.Permission, Broker: q.Broker, AcceptMessageTypes: q.AcceptMessageTypes})
			}
		}
		qs = any
	}
	out := make([]*v2.Assignment, len(qs))
	for i, q := range qs {
		out[i] = &v2.Assignment{MessageQueue: q}
	}
	return &v2.QueryAssignmentResponse{Status: okStatus(), Assignments: out}, nil
}

// Heartbeat keeps a client alive; nothing to record beyond its telemetry.
func (s *Server) Heartbeat(ctx context.Context, req *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
	if clientID(ctx) == "" {
		return &v2.HeartbeatResponse{Status: &v2.Status{Code: v2.Code_CLIENT_ID_REQUIRED, Message: "x-mq-client-id required"}}, nil
	}
	return &v2.HeartbeatResponse{Status: okStatus()}, nil
}

// NotifyClientTermination acknowledges a client's graceful stop.
func (s *Server) NotifyClientTermination(ctx context.Context, req *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
	return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
}

// errNotFound reports whether err is an unknown topic.
func errNotFound(err error) bool { return errors.Is(err, model.ErrUnknownTopic) }
