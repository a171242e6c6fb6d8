package kafka

// CreateTopics (key 19), versions 0-7.
//
// Version notes: any positive replication factor (or -1) is accepted on a
// single node so tools that hard-code RF=3 work; the topic has one replica.
// In a cluster a partition has the replicas of its replication group (every
// member on up to three members; three on larger clusters, group 0's every
// member; one for a cluster made with replication factor 1): a factor above
// what every partition of the topic gets is INVALID_REPLICATION_FACTOR
// (fewer copies than asked for are never made), a smaller one is accepted,
// and the answer names the real factor.
// 0 or below -1 is INVALID_REPLICATION_FACTOR. NumPartitions -1 takes the
// broker default, 0 or below -1 is INVALID_PARTITIONS; manual assignments set
// the partition count. Names outside [a-zA-Z0-9._-] (a '/' separates a
// namespace), longer than 249 or "." / ".." are INVALID_TOPIC_EXCEPTION; a
// name given twice in one request is INVALID_REQUEST (answered once); an
// unknown config or an unparsable value is INVALID_CONFIG. validate_only
// applies every check and creates nothing. v5+ answers with the partition
// count, replication factor and configs.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
)

func handleCreateTopics(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	s := rc.srv()
	seen := map[string]int{}
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewCreateTopicsResponseTopic()
		tr.Topic = rt.Topic
		tr.NumPartitions = -1
		tr.ReplicationFactor = -1
		tr.TopicID = [16]byte{}
		if c := seen[rt.Topic]; c != 1 {
			if c > 1 { // a repeated name is answered once
				seen[rt.Topic] = 0
				tr.ErrorCode = kerr.InvalidRequest.Code
				tr.ErrorMessage = strp("topic named more than once in the request")
				resp.Topics = append(resp.Topics, tr)
			}
			continue
		}
		n := int(rt.NumPartitions)
		if len(rt.ReplicaAssignment) > 0 {
			n = len(rt.ReplicaAssignment)
		}
		if n == -1 {
			n = s.cat().DefaultQueues()
		}
		var cfg broker.TopicConfig
		var err error
		for _, c := range rt.Configs {
			if err = applyConfig(&cfg, c.Name, c.Value); err != nil {
				break
			}
		}
		name, nerr := s.newKafkaTopicName(rc.conn.home, rt.Topic)
		view := s.clusterView()
		if view != nil && rt.ReplicationFactor > 0 {
			// A cluster places the topic in groups of that many voters.
			cfg.ReplicationFactor = int(rt.ReplicationFactor)
		}
		var t *broker.Topic
		switch {
		case nerr == nil && !rc.allowedCreateTopic(rt.Topic):
			err = errTopicAuthorization
		case nerr != nil:
			err = nerr
		case err == nil && (rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1):
			tr.ErrorCode = kerr.InvalidReplicationFactor.Code
		case err == nil && view != nil && int(rt.ReplicationFactor) > len(view.Hosts):
			tr.ErrorCode = kerr.InvalidReplicationFactor.Code
			tr.ErrorMessage = strp(fmt.Sprintf("Replication factor: %d larger than the %d members of this cluster.", rt.ReplicationFactor, len(view.Hosts)))
		case err == nil && n <= 0:
			tr.ErrorCode = kerr.InvalidPartitions.Code
		case err == nil && cfg.Validate() != nil:
			err = cfg.Validate()
		case err == nil && req.ValidateOnly:
			if _, terr := s.cat().Topic(name); terr == nil {
				tr.ErrorCode = kerr.TopicAlreadyExists.Code
			}
		case err == nil:
			if t, err = s.cat().CreateWholeTopic(rc.ctx(), name, n, cfg); err == nil {
				tr.TopicID = topicID(t)
			}
		}
		if err != nil {
			tr.ErrorCode = controllerErrorCode(err)
			tr.ErrorMessage = errorMessage(err)
		}
		if tr.ErrorCode == 0 {
			tr.NumPartitions, tr.ReplicationFactor = int32(n), int16(s.copies(t, cfg.ReplicationFactor))
			for _, dc := range describeTopicConfig(&cfg, brokerTopicDefaults(s.cat())) {
				v := dc.value
				tc := kmsg.NewCreateTopicsResponseTopicConfig()
				tc.Name = dc.name
				tc.Value = &v
				tc.Source = sourceOf(dc.isDefault)
				tr.Configs = append(tr.Configs, tc)
			}
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}

func sourceOf(isDefault bool) int8 {
	if isDefault {
		return int8(kmsg.ConfigSourceDefaultConfig)
	}
	return int8(kmsg.ConfigSourceDynamicTopicConfig)
}
