package admin

import (
	"math"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// Queue numbers in the API are topic-wide, as Kafka numbers partitions:
// when a cluster spreads topics over several replication groups, a
// group's broker holds topic-wide queue q as its own queue q / G
// (route.Placement), and answers for its share in topic-wide numbers.

// apiQueue is the topic-wide number of the broker's own queue local.
func apiQueue(b *broker.Broker, local int32) int32 {
	if local < 0 {
		return local
	}
	return int32(b.Placement().Global(int(local)))
}

// localQueue is the broker's own index of topic-wide queue q; held is
// false when another replication group holds it, ok false when the topic
// has no such queue.
func localQueue(b *broker.Broker, t *broker.Topic, q int64) (local int32, held, ok bool) {
	p := b.Placement()
	if q < 0 || q > math.MaxInt32 {
		return 0, false, false
	}
	if !p.Holds(int(q)) {
		return 0, false, int(q) < len(t.All)
	}
	l := p.Local(int(q))
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
