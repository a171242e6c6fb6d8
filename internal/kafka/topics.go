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

// topicName parses a Kafka topic name: "orders" is public/default/orders;
// "ns/orders" and "tenant/ns/orders" name other namespaces.
func (s *Server) topicName(name string) (model.TopicName, error) {
	switch name {
	case consumerOffsetsName:
		return s.broker.OffsetsTopic().Name, nil
	case transactionStateName:
		return txn.StateTopic, nil
	}
	return model.ParseTopicName(name)
}

// errInternalTopic refuses changes to an internal topic (its records and
// settings are Rosetta's own), as DeleteTopics does.
var errInternalTopic = &kafkaCodeError{code: kerr.TopicAuthorizationFailed.Code, msg: "internal topics cannot be changed"}

// changeableTopicName parses the name of a topic a request wants to change
// (grow, delete records from, reconfigure): internal topics are refused.
func (s *Server) changeableTopicName(name string) (model.TopicName, error) {
	n, err := s.topicName(name)
	if err != nil {
		return n, err
	}
	if t, terr := s.broker.Topic(n); terr == nil && t.Internal {
		return n, errInternalTopic
	}
	return n, nil
}

// newKafkaTopicName parses the name of a topic a Kafka client creates, which
// must also be a legal Kafka name: RocketMQ's '%' (system topics) is refused.
func (s *Server) newKafkaTopicName(name string) (model.TopicName, error) {
	if strings.Contains(name, "%") {
		return model.TopicName{}, fmt.Errorf("%w: %q: character '%%' is not allowed", model.ErrInvalidTopic, name)
	}
	return s.topicName(name)
}

// lookupTopic resolves a Kafka topic name to an existing topic.
func (s *Server) lookupTopic(name string) (*broker.Topic, error) {
	n, err := s.topicName(name)
	if err != nil {
		return nil, err
	}
	return s.broker.Topic(n)
}

// kafkaName is the name Kafka clients see.
func kafkaName(t *broker.Topic) string {
	switch {
	case t.Internal && t.Name == txn.StateTopic:
		return transactionStateName
	case t.Internal && t.Name.Topic == "consumer_offsets":
		return consumerOffsetsName
	}
	return t.Name.Short()
}

// topicID is the topic's stable UUID.
func topicID(t *broker.Topic) [16]byte { return t.ID }

func strp(s string) *string { return &s }
