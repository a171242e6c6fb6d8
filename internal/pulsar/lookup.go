package pulsar

import (
	"errors"
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

// handleLookup answers LOOKUP: this node serves every topic.
func (c *conn) handleLookup(m *pulsarpb.CommandLookupTopic) {
	resp := &pulsarpb.CommandLookupTopicResponse{RequestId: proto.Uint64(m.GetRequestId())}
	if _, err := ParseTopic(m.GetTopic()); err != nil {
		resp.Response = pulsarpb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error, resp.Message = errorCode(err).Enum(), proto.String(err.Error())
	} else {
		plain, secured := c.serviceURLs()
		resp.Response = pulsarpb.CommandLookupTopicResponse_Connect.Enum()
		resp.BrokerServiceUrl, resp.BrokerServiceUrlTls = proto.String(plain), proto.String(secured)
		resp.Authoritative = proto.Bool(true)
	}
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
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

// topicFor resolves a topic a producer or consumer names, creating it
// (one queue: a non-partitioned topic) when auto-creation allows, and the
// queue index the name addresses.
func (c *conn) topicFor(name string) (*broker.Topic, int32, TopicRef, error) {
	ref, err := ParseTopic(name)
	if err != nil {
		return nil, 0, ref, err
	}
	t, err := c.s.b.EnsureTopicWith(c.ctx, ref.Name, 1)
	if err != nil {
		return nil, 0, ref, err
	}
	index := int32(max(ref.Partition, 0))
	if int(index) >= len(t.All) {
		return nil, 0, ref, model.ErrUnknownQueue
	}
	return t, index, ref, nil
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
