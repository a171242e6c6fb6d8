package kafka

import (
	"crypto/sha256"
	"fmt"

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

// topicID derives a stable topic UUID from the topic's name and creation
// time, so a re-created topic gets a new id.
func topicID(t *broker.Topic) [16]byte {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s@%d", t.FullName, t.CreatedMs)))
	var id [16]byte
	copy(id[:], h[:16])
	id[6] = id[6]&0x0f | 0x40 // version 4 layout
	id[8] = id[8]&0x3f | 0x80
	return id
}

func strp(s string) *string { return &s }
