package kafka

// Metadata (key 3), versions 0-12.
//
// Version notes: one broker (this node) leads every partition; replicas and
// ISR are this node. Topic ids are random UUIDs stored with the topic. The
// leader epoch is -1, which tells KIP-320 clients not to validate epochs. v0
// with no topics and v1+ with null topics mean "all topics". Unknown topics
// are created when auto-creation is on and the request allows it (v4+ flag;
// always for v0-3, as Kafka does). A request for all topics lists
// __consumer_offsets too, flagged internal.
//
// Not implemented: authorized operations (always -2147483648 = not asked).

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleMetadata(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	s := rc.srv()
	host, port := s.advertised(rc.conn)
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: s.opts.NodeID, Host: host, Port: port}}
	resp.ClusterID = strp(s.opts.ClusterID)
	resp.ControllerID = s.opts.NodeID

	var topics []*broker.Topic
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		topics = append(s.broker.Topics(false), s.broker.OffsetsTopic())
		if t, err := s.broker.Topic(txn.StateTopic); err == nil {
			topics = append(topics, t)
		}
		if rc.authzOn() { // list only what the principal may describe
			kept := topics[:0]
			for _, t := range topics {
				if rc.allowedTopic(rc.kafkaName(t), security.OpDescribe) {
					kept = append(kept, t)
				}
			}
			topics = kept
		}
	} else {
		autoCreate := req.Version < 4 || req.AllowAutoTopicCreation
		for _, rt := range req.Topics {
			if rt.Topic == nil {
				resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: kerr.UnknownTopicID.Code, TopicID: rt.TopicID})
				continue
			}
			name, err := rc.topicName(*rt.Topic)
			if err != nil {
				resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: kerr.InvalidTopicException.Code, Topic: rt.Topic})
				continue
			}
			if !rc.allowedTopic(*rt.Topic, security.OpDescribe) {
				resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: kerr.TopicAuthorizationFailed.Code, Topic: rt.Topic})
				continue
			}
			var t *broker.Topic
			if autoCreate && !rc.allowedCreateTopic(*rt.Topic) {
				// Not allowed to create: a missing topic is refused as Kafka does.
				if t, err = s.broker.Topic(name); err != nil {
					resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: kerr.TopicAuthorizationFailed.Code, Topic: rt.Topic})
					continue
				}
			} else if autoCreate {
				t, err = s.broker.EnsureTopic(rc.ctx(), name)
			} else {
				t, err = s.broker.Topic(name)
			}
			if err != nil {
				code := errorCode(err)
				if errors.Is(err, model.ErrUnknownTopic) {
					code = kerr.UnknownTopicOrPartition.Code
				}
				resp.Topics = append(resp.Topics, kmsg.MetadataResponseTopic{ErrorCode: code, Topic: rt.Topic})
				continue
			}
			topics = append(topics, t)
		}
	}
	for _, t := range topics {
		mt := kmsg.MetadataResponseTopic{Topic: strp(rc.kafkaName(t)), TopicID: topicID(t), IsInternal: t.Internal,
			AuthorizedOperations: -2147483648}
		for i := range t.Queues {
			mt.Partitions = append(mt.Partitions, kmsg.MetadataResponseTopicPartition{
				Partition: int32(i), Leader: s.opts.NodeID, LeaderEpoch: -1,
				Replicas: []int32{s.opts.NodeID}, ISR: []int32{s.opts.NodeID},
			})
		}
		resp.Topics = append(resp.Topics, mt)
	}
	resp.AuthorizedOperations = -2147483648
	return reply{resp: resp}
}
