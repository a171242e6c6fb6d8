package kafka

// AlterConfigs (key 33), versions 0-2.
//
// Version notes: replaces a topic's whole configuration with the given keys
// (Kafka's non-incremental semantics). validate_only checks without writing.
// A broker resource (this node's id, or empty for the cluster-wide default)
// has its dynamic broker configs replaced, validated as Kafka does
// (read-only configs and node-only configs at the default level are
// INVALID_REQUEST). A bad value is INVALID_CONFIG with a message naming the
// key.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleAlterConfigs(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, r := range req.Resources {
		code, msg := rc.srv().alterResource(rc, r.ResourceType, r.ResourceName, req.ValidateOnly, func(c *broker.TopicConfig) error {
			// The given set replaces the topic's configs; its replication
			// factor is where its queues live, not a config.
			*c = broker.TopicConfig{ReplicationFactor: c.ReplicationFactor}
			for _, e := range r.Configs {
				if err := applyConfig(c, e.Name, e.Value); err != nil {
					return err
				}
			}
			return nil
		}, func(cfg map[string]string) error {
			clear(cfg) // the given set replaces the resource's dynamic configs
			for _, e := range r.Configs {
				if e.Value != nil {
					cfg[e.Name] = *e.Value
				}
			}
			return nil
		})
		res := kmsg.NewAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName, res.ErrorCode, res.ErrorMessage = r.ResourceType, r.ResourceName, code, msg
		resp.Resources = append(resp.Resources, res)
	}
	return reply{resp: resp}
}

// alterResource applies a config change to one resource (a topic's
// configuration, or a broker resource's dynamic configs) and returns the
// answer's code and message.
func (s *Server) alterResource(rc *reqCtx, typ kmsg.ConfigResourceType, name string, validateOnly bool,
	change func(*broker.TopicConfig) error, brokerChange func(map[string]string) error) (int16, *string) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
	case kmsg.ConfigResourceTypeBroker:
		if !rc.authorizedCluster(security.OpAlterConfigs) {
			return kerr.ClusterAuthorizationFailed.Code, nil
		}
		err := s.alterBrokerConfigs(rc, name, validateOnly, brokerChange)
		return errorCode(err), errorMessage(err)
	case kmsg.ConfigResourceTypeGroupConfig:
		if !rc.allowedGroup(name, security.OpAlterConfigs) {
			return kerr.GroupAuthorizationFailed.Code, nil
		}
		// (a group's configs are a map of names, as a broker's are)
		err := s.alterGroupConfigs(rc, name, validateOnly, brokerChange)
		return errorCode(err), errorMessage(err)
	default:
		return kerr.InvalidRequest.Code, nil
	}
	if !rc.allowedTopic(name, security.OpAlterConfigs) {
		return kerr.TopicAuthorizationFailed.Code, nil
	}
	err := s.alterTopicConfig(rc, name, validateOnly, change)
	return errorCode(err), errorMessage(err)
}

// alterTopicConfig applies change to a copy of a topic's configuration,
// validates it and stores it unless validateOnly.
func (s *Server) alterTopicConfig(rc *reqCtx, topic string, validateOnly bool, change func(*broker.TopicConfig) error) error {
	name, err := rc.changeableTopicName(topic)
	if err != nil {
		return err
	}
	t, err := s.cat().Topic(name)
	if err != nil {
		return err
	}
	cfg := t.Config
	if cfg.Extra != nil {
		extra := make(map[string]string, len(cfg.Extra))
		for k, v := range cfg.Extra {
			extra[k] = v
		}
		cfg.Extra = extra
	}
	if err := change(&cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	_, err = s.cat().UpdateTopicConfig(rc.ctx(), name, cfg)
	return err
}
