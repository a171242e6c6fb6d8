package kafka

import (
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
)

// groupTopics is the consumer-group coordinator's view of topics, in the
// names Kafka clients use.
type groupTopics struct {
	s *Server
	h home // the member's home namespace
}

func (g groupTopics) meta(t *broker.Topic) groups.TopicMeta {
	return groups.TopicMeta{ID: topicID(t), Name: kafkaName(g.h, t), Partitions: int32(len(t.All))}
}

func (g groupTopics) ByName(name string) (groups.TopicMeta, bool) {
	t, err := g.s.lookupTopic(g.h, name)
	if err != nil || t.Internal {
		return groups.TopicMeta{}, false
	}
	return g.meta(t), true
}

func (g groupTopics) ByID(id groups.TopicID) (groups.TopicMeta, bool) {
	t, err := g.s.cat().TopicByID(id)
	if err != nil {
		return groups.TopicMeta{}, false
	}
	return g.meta(t), true
}

// All lists what a regular expression subscription is matched against:
// every topic, Kafka's internal ones included, as Kafka does (clients
// filter internal topics out themselves when they want to).
func (g groupTopics) All() []groups.TopicMeta {
	ts := g.s.kafkaTopics()
	out := make([]groups.TopicMeta, len(ts))
	for i, t := range ts {
		out[i] = g.meta(t)
	}
	return out
}

func (g groupTopics) Version() uint64 { return g.s.cat().TopicsVersion() }
