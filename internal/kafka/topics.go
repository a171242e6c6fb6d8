package kafka

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
)

// consumerOffsetsName is the name Kafka clients know the internal offsets
// topic by. It is listed (internal) in Metadata, so regex subscriptions that
// leave internal topics out behave as on Kafka; it cannot be produced to,
// and fetching from it returns nothing (commits are stored in Rosetta's own
// format, not Kafka's).
const consumerOffsetsName = "__consumer_offsets"

// transactionStateName is the name of the transaction coordinator's
// internal topic, listed like __consumer_offsets.
const transactionStateName = "__transaction_state"

// home is the namespace a connection's short topic names resolve in: the
// default one, or the namespace its principal is bound to.
type home struct{ tenant, namespace string }

// defaultHome is public/default.
var defaultHome = home{model.DefaultTenant, model.DefaultNamespace}

// parseHome reads "tenant/namespace" (empty: the default).
func parseHome(s string) (home, bool) {
	t, ns, ok := strings.Cut(s, "/")
	if s == "" || !ok || t == "" || ns == "" || strings.Contains(ns, "/") {
		return defaultHome, s == ""
	}
	return home{t, ns}, true
}

// topicName parses a Kafka topic name relative to a home namespace:
// "orders" is <home>/orders, "ns/orders" the namespace ns of the home's
// tenant, "tenant/ns/orders" itself. With the default home, "orders" is
// public/default/orders.
func (s *Server) topicName(h home, name string) (model.TopicName, error) {
	switch name {
	case consumerOffsetsName:
		return s.cat().OffsetsTopic().Name, nil
	case transactionStateName:
		return txn.StateTopic, nil
	}
	if h == defaultHome || h == (home{}) {
		return model.ParseTopicName(name)
	}
	switch strings.Count(name, "/") {
	case 0:
		name = h.tenant + "/" + h.namespace + "/" + name
	case 1:
		name = h.tenant + "/" + name
	}
	return model.ParseTopicName(name)
}

// errInternalTopic refuses changes to an internal topic (its records and
// settings are Rosetta's own), as DeleteTopics does.
var errInternalTopic = &kafkaCodeError{code: kerr.TopicAuthorizationFailed.Code, msg: "internal topics cannot be changed"}

// changeableTopicName parses the name of a topic a request wants to change
// (grow, delete records from, reconfigure): internal topics are refused.
func (s *Server) changeableTopicName(h home, name string) (model.TopicName, error) {
	n, err := s.topicName(h, name)
	if err != nil {
		return n, err
	}
	if t, terr := s.cat().Topic(n); terr == nil && t.Internal {
		return n, errInternalTopic
	}
	return n, nil
}

// newKafkaTopicName parses the name of a topic a Kafka client creates, which
// must also be a legal Kafka name: RocketMQ's '%' (system topics) is refused.
func (s *Server) newKafkaTopicName(h home, name string) (model.TopicName, error) {
	if strings.Contains(name, "%") {
		return model.TopicName{}, fmt.Errorf("%w: %q: character '%%' is not allowed", model.ErrInvalidTopic, name)
	}
	return s.topicName(h, name)
}

// lookupTopic resolves a Kafka topic name to an existing topic.
func (s *Server) lookupTopic(h home, name string) (*broker.Topic, error) {
	n, err := s.topicName(h, name)
	if err != nil {
		return nil, err
	}
	return s.cat().Topic(n)
}

// kafkaName is the name Kafka clients of a home namespace see: the
// shortest that topicName maps back.
func kafkaName(h home, t *broker.Topic) string {
	switch {
	case t.Internal && t.Name == txn.StateTopic:
		return transactionStateName
	case t.Internal && t.Name.Topic == "consumer_offsets":
		return consumerOffsetsName
	case h == defaultHome || h == (home{}):
		return t.Name.Short()
	case t.Name.Tenant == h.tenant && t.Name.Namespace == h.namespace:
		return t.Name.Topic
	case t.Name.Tenant == h.tenant:
		return t.Name.Namespace + "/" + t.Name.Topic
	}
	return t.Name.String()
}

// Request-scoped forms: names relative to the connection's home.

func (r *reqCtx) topicName(name string) (model.TopicName, error) {
	return r.srv().topicName(r.conn.home, name)
}

func (r *reqCtx) lookupTopic(name string) (*broker.Topic, error) {
	return r.srv().lookupTopic(r.conn.home, name)
}

func (r *reqCtx) changeableTopicName(name string) (model.TopicName, error) {
	return r.srv().changeableTopicName(r.conn.home, name)
}

func (r *reqCtx) kafkaName(t *broker.Topic) string { return kafkaName(r.conn.home, t) }

// topicID is the topic's stable UUID.
func topicID(t *broker.Topic) [16]byte { return t.ID }

func strp(s string) *string { return &s }
