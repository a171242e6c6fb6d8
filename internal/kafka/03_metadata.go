package kafka

// Metadata (key 3), versions 0-12.
//
// Version notes: partition p belongs to replication group p mod the group
// count; its leader and epoch come from that group's broker when this node
// serves it, otherwise from the cluster's view of the group (its Raft
// leader and term), the same on every node. On a single node this node
// leads every partition. Replicas and ISR are this node, or in a cluster the
// group's voters (its preferred leader first) and those caught up; the
// brokers are every node, the controller group 0's leader. Topic ids are random UUIDs stored with the topic. The
// leader epoch is the partition's (0 on a single node), which KIP-320 clients
// validate their positions with. v0
// with no topics and v1+ with null topics mean "all topics". Unknown topics
// are created when auto-creation is on and the request allows it (v4+ flag;
// always for v0-3, as Kafka does). A request for all topics lists
// __consumer_offsets too, flagged internal. A topic named by id alone (a
// null name, v10+) is looked up by id (UNKNOWN_TOPIC_ID when none).
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
	for _, ba := range s.brokers(rc.conn) {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = ba.id, ba.host, ba.port
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.ClusterID = strp(s.opts.ClusterID)
	resp.ControllerID = s.controller()
	views := make([]GroupView, s.knownGroups())
	for g := range views {
		views[g] = s.groupView(g)
	}

	var topics []*broker.Topic
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		topics = s.kafkaTopics()
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
				// v10+: a topic named by id alone (share consumers look
				// up the topics of their assignment so).
				t, err := s.cat().TopicByID(rt.TopicID)
				switch {
				case err != nil || rt.TopicID == [16]byte{}:
					resp.Topics = append(resp.Topics, metadataTopicError(kerr.UnknownTopicID.Code, nil, rt.TopicID))
				case !rc.allowedTopic(rc.kafkaName(t), security.OpDescribe):
					resp.Topics = append(resp.Topics, metadataTopicError(kerr.TopicAuthorizationFailed.Code, nil, rt.TopicID))
				default:
					topics = append(topics, t)
				}
				continue
			}
			name, err := rc.topicName(*rt.Topic)
			if err != nil {
				resp.Topics = append(resp.Topics, metadataTopicError(kerr.InvalidTopicException.Code, rt.Topic, [16]byte{}))
				continue
			}
			if !rc.allowedTopic(*rt.Topic, security.OpDescribe) {
				resp.Topics = append(resp.Topics, metadataTopicError(kerr.TopicAuthorizationFailed.Code, rt.Topic, [16]byte{}))
				continue
			}
			var t *broker.Topic
			if autoCreate && !rc.allowedCreateTopic(*rt.Topic) {
				// Not allowed to create: a missing topic is refused as Kafka does.
				if t, err = s.cat().Topic(name); err != nil {
					resp.Topics = append(resp.Topics, metadataTopicError(kerr.TopicAuthorizationFailed.Code, rt.Topic, [16]byte{}))
					continue
				}
			} else if autoCreate {
				t, err = s.cat().EnsureWholeTopic(rc.ctx(), name)
			} else {
				t, err = s.cat().Topic(name)
			}
			if err != nil {
				code := errorCode(err)
				if errors.Is(err, model.ErrUnknownTopic) {
					code = kerr.UnknownTopicOrPartition.Code
				}
				resp.Topics = append(resp.Topics, metadataTopicError(code, rt.Topic, [16]byte{}))
				continue
			}
			topics = append(topics, t)
		}
	}
	for _, t := range topics {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = strp(rc.kafkaName(t))
		mt.TopicID = topicID(t)
		mt.IsInternal = t.Internal
		mt.AuthorizedOperations = -2147483648
		for i := range t.All {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition = int32(i)
			var v GroupView
			if g := int(t.GroupOf(i)); g < len(views) {
				v = views[g]
			} else { // a group this member does not know yet
				v = GroupView{Leader: -1, Epoch: -1}
			}
			mp.Leader, mp.LeaderEpoch = v.Leader, v.Epoch
			if mp.LeaderEpoch >= 0 {
				mp.LeaderEpoch += int32(t.EpochBase(i))
			}
			if pp, err := s.partition(t, int32(i)); err == nil {
				// Served here: the partition's own epoch.
				loc, err := pp.be.broker.Locate(pp.topic.Name, pp.index)
				mp.Leader, mp.LeaderEpoch, mp.ErrorCode = int32(loc.Leader), int32(loc.Epoch), errorCode(err)
			}
			if mp.ErrorCode == 0 && mp.Leader < 0 {
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
			}
			mp.Replicas, mp.ISR = v.Replicas, v.ISR
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	resp.AuthorizedOperations = -2147483648
	return reply{resp: resp}
}

// metadataTopicError answers one requested topic with an error.
func metadataTopicError(code int16, topic *string, id [16]byte) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.ErrorCode, mt.Topic, mt.TopicID = code, topic, id
	return mt
}

// kafkaTopics lists every topic a Kafka client may see: the user topics and
// Kafka's own internal ones (__consumer_offsets, __transaction_state).
func (s *Server) kafkaTopics() []*broker.Topic {
	topics := append(s.cat().Topics(false), s.cat().OffsetsTopic())
	if t, err := s.cat().Topic(txn.StateTopic); err == nil {
		topics = append(topics, t)
	}
	return topics
}
