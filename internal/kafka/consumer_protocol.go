package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// DecodeConsumerProtocol reads a classic group member's subscription
// (metadata) and assignment in Kafka's consumer protocol: the topics it
// subscribes to and the partitions it holds per topic. What does not
// decode is left out.
func DecodeConsumerProtocol(metadata, assignment []byte) (topics []string, assigned map[string][]int32) {
	var sub kmsg.ConsumerMemberMetadata
	if sub.ReadFrom(metadata) == nil {
		topics = sub.Topics
	}
	var a kmsg.ConsumerMemberAssignment
	if len(assignment) > 0 && a.ReadFrom(assignment) == nil {
		assigned = make(map[string][]int32, len(a.Topics))
		for _, t := range a.Topics {
			assigned[t.Topic] = append(assigned[t.Topic], t.Partitions...)
		}
	}
	return topics, assigned
}
