package pulsar

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/model"
)

// Pulsar topic names: persistent://tenant/namespace/topic is Rosetta's
// tenant/namespace/topic; a short name is in public/default, as the
// clients complete it; partition i of a partitioned topic is
// <topic>-partition-<i>, queue i of the topic. Non-persistent topics have
// no place in a store and are refused.

// ErrNonPersistent is a non-persistent:// topic.
var ErrNonPersistent = fmt.Errorf("%w: non-persistent topics are not served (every topic is stored)", model.ErrInvalidTopic)

// partitionSuffix names a partition of a partitioned topic.
const partitionSuffix = "-partition-"

// TopicRef is a Pulsar topic name resolved: the topic and, for one
// partition of a partitioned topic, its index (-1 for the whole topic).
type TopicRef struct {
	Name      model.TopicName
	Partition int
}

// ParseTopic resolves a Pulsar topic name.
func ParseTopic(s string) (TopicRef, error) {
	domain, rest, ok := strings.Cut(s, "://")
	switch {
	case !ok:
		rest = s // tenant/namespace/topic or topic
	case domain == "persistent":
	case domain == "non-persistent":
		return TopicRef{}, fmt.Errorf("%w: %q", ErrNonPersistent, s)
	default:
		return TopicRef{}, fmt.Errorf("%w: %q: domain %q (persistent)", model.ErrInvalidTopic, s, domain)
	}
	if ok && strings.Count(rest, "/") != 2 {
		return TopicRef{}, fmt.Errorf("%w: %q: want persistent://tenant/namespace/topic", model.ErrInvalidTopic, s)
	}
	if !ok && strings.Count(rest, "/") != 0 && strings.Count(rest, "/") != 2 {
		return TopicRef{}, fmt.Errorf("%w: %q: want tenant/namespace/topic or a topic", model.ErrInvalidTopic, s)
	}
	ref := TopicRef{Partition: -1}
	topicAt := strings.LastIndexByte(rest, '/') + 1
	if i := strings.LastIndex(rest[topicAt:], partitionSuffix); i > 0 { // the topic before it is not empty
		digits := rest[topicAt+i+len(partitionSuffix):]
		if n, err := strconv.Atoi(digits); err == nil && n >= 0 && strconv.Itoa(n) == digits {
			ref.Partition, rest = n, rest[:topicAt+i]
		}
	}
	name, err := model.ParseTopicName(rest)
	if err != nil {
		return TopicRef{}, err
	}
	ref.Name = name
	return ref, nil
}

// String is the ref's full Pulsar name.
func (r TopicRef) String() string {
	s := "persistent://" + r.Name.String()
	if r.Partition >= 0 {
		s += partitionSuffix + strconv.Itoa(r.Partition)
	}
	return s
}
