package kafka

import (
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// topicName parses a Kafka topic name: "orders" is public/default/orders;
// "ns/orders" and "tenant/ns/orders" name other namespaces.
func topicName(s string) (model.TopicName, error) {
	return model.ParseTopicName(s)
}

// lookupTopic resolves a Kafka topic name to an existing topic.
func (s *Server) lookupTopic(name string) (*broker.Topic, error) {
	n, err := topicName(name)
	if err != nil {
		return nil, err
	}
	return s.broker.Topic(n)
}

// kafkaName is the name Kafka clients see.
func kafkaName(t *broker.Topic) string { return t.Name.Short() }

// topicID is the topic's stable UUID.
func topicID(t *broker.Topic) [16]byte { return t.ID }

func strp(s string) *string { return &s }
