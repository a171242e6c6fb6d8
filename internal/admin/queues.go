package admin

import (
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// Queue numbers in the API are topic-wide, as Kafka numbers partitions:
// when a cluster spreads topics over several replication groups, a
// group's broker holds its share of each topic's queues, numbered from 0
// (the topic's route.Table says which), and answers in topic-wide numbers.

// apiQueue is the topic-wide number of the broker's own queue local of t.
func apiQueue(b *broker.Broker, t *broker.Topic, local int32) int32 {
	if local < 0 || t == nil {
		return local
	}
	if g := t.GlobalIndex(b.Placement().Group, int(local)); g >= 0 {
		return int32(g)
	}
	return local
}

// apiQueueNamed is apiQueue for a topic named by its full name (the local
// number when the broker does not know it).
func apiQueueNamed(b *broker.Broker, topic string, local int32) int32 {
	name, err := model.ParseTopicName(topic)
	if err != nil {
		return local
	}
	t, err := b.Topic(name)
	if err != nil {
		return local
	}
	return apiQueue(b, t, local)
}

// localQueue is the broker's own index of topic-wide queue q; held is
// false when another replication group holds it, ok false when the topic
// has no such queue.
func localQueue(b *broker.Broker, t *broker.Topic, q int64) (local int32, held, ok bool) {
	if q < 0 || q >= int64(len(t.All)) {
		return 0, false, false
	}
	if t.GroupOf(int(q)) != b.Placement().Group {
		return 0, false, true
	}
	l := t.LocalIndex(int(q))
	return int32(l), l < t.QueueCount(), l < t.QueueCount()
}

// queueRef is a queue id's topic and topic-wide number.
type queueRef struct {
	topic *broker.Topic
	queue int32
}

// queueRefs maps the queue ids of every topic, whichever replication
// group holds them, to their topic and topic-wide number.
func queueRefs(b *broker.Broker) map[model.QueueID]queueRef {
	out := map[model.QueueID]queueRef{}
	for _, t := range b.Topics(true) {
		for i, id := range t.All {
			out[id] = queueRef{t, int32(i)}
		}
	}
	return out
}
