package pulsar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// serviceURLs are the pulsar:// and pulsar+ssl:// addresses lookups
// answer with: the advertised one, else the listeners' (a listener bound
// to every address named by the address the client reached).
func (c *conn) serviceURLs() (plain, secured string) {
	s := c.s
	s.addrMu.Lock()
	pl, sl := s.plain, s.secured
	s.addrMu.Unlock()
	local := c.nc.LocalAddr().String()
	if pl == "" {
		pl = local
	}
	if sl == "" {
		sl = pl // the permissive listener takes TLS too
	}
	plain, secured = reachable(pl, local), reachable(sl, local)
	if a := s.opts.AdvertisedAddr; a != "" {
		plain = a
		if s.secured == "" {
			secured = a
		}
	}
	return "pulsar://" + plain, "pulsar+ssl://" + secured
}

// reachable is a listener's address as a client reaching local can use
// it: an unspecified host becomes local's.
func reachable(listener, local string) string {
	host, port, err := net.SplitHostPort(listener)
	if err != nil || (host != "" && !net.ParseIP(host).IsUnspecified()) {
		return listener
	}
	lh, _, err := net.SplitHostPort(local)
	if err != nil {
		return listener
	}
	return net.JoinHostPort(lh, port)
}

// handleLookup answers LOOKUP: a single node serves every topic, a
// cluster member names where the topic's queue is served (GroupAddr).
func (c *conn) handleLookup(m *pulsarpb.CommandLookupTopic) {
	resp := &pulsarpb.CommandLookupTopicResponse{RequestId: proto.Uint64(m.GetRequestId())}
	plain, secured, err := c.lookup(m.GetTopic())
	if err != nil {
		resp.Response = pulsarpb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error, resp.Message = errorCode(err).Enum(), proto.String(err.Error())
	} else {
		resp.Response = pulsarpb.CommandLookupTopicResponse_Connect.Enum()
		resp.BrokerServiceUrl, resp.BrokerServiceUrlTls = proto.String(plain), proto.String(secured)
		resp.Authoritative = proto.Bool(true)
	}
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
}

// lookup is where a topic's clients connect: this node's service URLs,
// or on a cluster those of the member serving the topic's queue (the
// topic made first when auto-creation allows, so its queue has a group).
func (c *conn) lookup(name string) (plain, secured string, err error) {
	if c.s.opts.GroupAddr == nil {
		if _, err := ParseTopic(name); err != nil {
			return "", "", err
		}
		plain, secured = c.serviceURLs()
		return plain, secured, nil
	}
	return c.s.groupURLs(c.ctx, name, c.nc.LocalAddr(), c.nc.RemoteAddr())
}

// groupURLs are the service URLs of the member serving a topic's queue on
// a cluster, for a client that reached this node (local) from remote.
func (s *Server) groupURLs(ctx context.Context, name string, local, remote net.Addr) (plain, secured string, err error) {
	tg, err := s.resolve(ctx, name)
	if err != nil {
		return "", "", err
	}
	addr := s.opts.GroupAddr(tg.home, local, remote)
	if addr == "" {
		return "", "", fmt.Errorf("%w: no address for replication group %d", model.ErrNotLeader, tg.home)
	}
	return "pulsar://" + addr, "pulsar+ssl://" + addr, nil
}

// handlePartitionedMetadata answers PARTITIONED_METADATA: a topic of one
// queue is a non-partitioned topic (0), one of n queues has n partitions;
// an unknown topic is created non-partitioned when a producer or consumer
// first uses it.
func (c *conn) handlePartitionedMetadata(m *pulsarpb.CommandPartitionedTopicMetadata) {
	resp := &pulsarpb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(m.GetRequestId()),
		Response: pulsarpb.CommandPartitionedTopicMetadataResponse_Success.Enum(), Partitions: proto.Uint32(0)}
	ref, err := ParseTopic(m.GetTopic())
	if err == nil && ref.Partition < 0 {
		var t *broker.Topic
		t, err = c.s.b.Topic(ref.Name)
		switch {
		case err == nil && len(t.All) > 1:
			resp.Partitions = proto.Uint32(uint32(len(t.All)))
		case errors.Is(err, model.ErrUnknownTopic) && c.s.b.AutoCreateTopics():
			err = nil
		}
	}
	if err != nil {
		resp.Response = pulsarpb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error, resp.Message = errorCode(err).Enum(), proto.String(err.Error())
	}
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: resp})
}

// handleTopicsOfNamespace lists a namespace's topics as Pulsar names (each
// partition of a partitioned topic by its own name), for regex consumers.
func (c *conn) handleTopicsOfNamespace(m *pulsarpb.CommandGetTopicsOfNamespace) {
	tenant, ns, _ := strings.Cut(m.GetNamespace(), "/")
	var names []string
	for _, t := range c.s.b.Topics(false) {
		if t.Name.Tenant != tenant || t.Name.Namespace != ns {
			continue
		}
		base := "persistent://" + t.Name.String()
		if len(t.All) <= 1 {
			names = append(names, base)
			continue
		}
		for i := range t.All {
			names = append(names, base+partitionSuffix+strconv.Itoa(i))
		}
	}
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(),
		GetTopicsOfNamespaceResponse: &pulsarpb.CommandGetTopicsOfNamespaceResponse{RequestId: proto.Uint64(m.GetRequestId()),
			Topics: names, Filtered: proto.Bool(false), Changed: proto.Bool(true)}})
}

// handleGetSchema answers that topics carry no stored schema: clients
// then use their own.
func (c *conn) handleGetSchema(m *pulsarpb.CommandGetSchema) {
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(),
		GetSchemaResponse: &pulsarpb.CommandGetSchemaResponse{RequestId: proto.Uint64(m.GetRequestId()),
			ErrorCode: pulsarpb.ServerError_TopicNotFound.Enum(), ErrorMessage: proto.String("no schema is stored for " + m.GetTopic())}})
}

// handleGetOrCreateSchema accepts a producer's schema (schemas are not
// stored: every schema is compatible).
func (c *conn) handleGetOrCreateSchema(m *pulsarpb.CommandGetOrCreateSchema) {
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE.Enum(),
		GetOrCreateSchemaResponse: &pulsarpb.CommandGetOrCreateSchemaResponse{RequestId: proto.Uint64(m.GetRequestId()),
			SchemaVersion: []byte{}}})
}

// target is the queue a Pulsar topic name addresses.
type target struct {
	topic *broker.Topic
	ref   TopicRef
	// partition is the queue's topic-wide index (its Kafka partition).
	partition int32
	// home is the replication group serving it to Pulsar clients (its
	// home: a moved queue is served there, the broker reaching its
	// records where they are), index its index at that group's broker.
	home  model.GroupID
	index int32
}

// resolve finds the queue a topic name addresses, creating the topic (one
// queue: a non-partitioned topic) when auto-creation allows.
func (s *Server) resolve(ctx context.Context, name string) (target, error) {
	ref, err := ParseTopic(name)
	if err != nil {
		return target{ref: ref}, err
	}
	t, err := s.b.EnsureWholeTopicWith(ctx, ref.Name, 1)
	if err != nil {
		return target{ref: ref}, err
	}
	p := max(ref.Partition, 0)
	if p >= len(t.All) {
		return target{ref: ref}, fmt.Errorf("%w: partition %d of %s (%d)", model.ErrUnknownQueue, p, ref.Name, len(t.All))
	}
	return target{topic: t, ref: ref, partition: int32(p), home: t.HomeOf(p), index: int32(t.HomeIndex(p))}, nil
}

// topicFor resolves a topic a producer or consumer names: a queue this
// node serves (one of another replication group is refused as
// ServiceNotReady, which makes the client look the topic up again).
func (c *conn) topicFor(name string) (target, error) {
	tg, err := c.s.resolve(c.ctx, name)
	if err == nil && !c.s.serves(tg.home) {
		err = fmt.Errorf("%w: %s is served by replication group %d", model.ErrNotLeader, name, tg.home)
	}
	return tg, err
}

// errorCode maps broker errors to Pulsar's server errors.
func errorCode(err error) pulsarpb.ServerError {
	switch {
	case errors.Is(err, model.ErrUnknownTopic), errors.Is(err, model.ErrUnknownQueue):
		return pulsarpb.ServerError_TopicNotFound
	case errors.Is(err, model.ErrInvalidTopic):
		return pulsarpb.ServerError_InvalidTopicName
	case errors.Is(err, model.ErrNotLeader):
		return pulsarpb.ServerError_ServiceNotReady
	case errors.Is(err, model.ErrMessageTooLarge), errors.Is(err, ErrUnsupported), errors.Is(err, ErrBadFrame):
		return pulsarpb.ServerError_NotAllowedError
	case errors.Is(err, model.ErrDiskFull):
		return pulsarpb.ServerError_PersistenceError
	}
	return pulsarpb.ServerError_UnknownError
}
