package kafka

// DescribeConfigs (key 32), versions 0-4.
//
// Version notes: topics show every config Rosetta maps (retention.ms,
// retention.bytes, max.message.bytes, message.timestamp.type,
// cleanup.policy) with defaults marked, plus any other key set on the topic;
// a broker resource (this node's id) shows its static settings and every
// dynamic broker config with its source, and synonyms when asked; the empty
// broker name shows the cluster-wide dynamic defaults; a group (GROUP, type
// 32) shows every group config, those it sets with the GROUP_CONFIG source
// (configs_group.go), whether or not the group exists. Unknown topics get
// UNKNOWN_TOPIC_OR_PARTITION; another broker's id INVALID_REQUEST.
//
// Not implemented: topic config synonyms and documentation strings.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDescribeConfigs(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	s := rc.srv()
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType = r.ResourceType
		rr.ResourceName = r.ResourceName
		var entries []describedConfig
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			name, err := rc.topicName(r.ResourceName)
			if !rc.allowedTopic(r.ResourceName, security.OpDescribeConfigs) {
				err = errTopicAuthorization
			}
			if err == nil {
				t, terr := s.cat().Topic(name)
				if terr == nil {
					cfg := t.Config
					entries = describeTopicConfig(&cfg, brokerTopicDefaults(s.cat()))
				}
				err = terr
			}
			if err != nil {
				rr.ErrorCode = errorCode(err)
			}
		case kmsg.ConfigResourceTypeBroker:
			if !rc.authorizedCluster(security.OpDescribeConfigs) {
				rr.ErrorCode = kerr.ClusterAuthorizationFailed.Code
			} else if err := s.brokerResource(r.ResourceName); err != nil {
				rr.ErrorCode, rr.ErrorMessage = errorCode(err), errorMessage(err)
			} else {
				rr.Configs = s.describeBrokerConfigs(r.ResourceName, r.ConfigNames, req.IncludeSynonyms)
			}
			resp.Resources = append(resp.Resources, rr)
			continue
		case kmsg.ConfigResourceTypeGroupConfig:
			if !rc.allowedGroup(r.ResourceName, security.OpDescribeConfigs) {
				rr.ErrorCode = kerr.GroupAuthorizationFailed.Code
			} else {
				rr.Configs = s.describeGroupConfigs(r.ResourceName, r.ConfigNames)
			}
			resp.Resources = append(resp.Resources, rr)
			continue
		default:
			rr.ErrorCode = kerr.InvalidRequest.Code
		}
		for _, e := range entries {
			if len(r.ConfigNames) > 0 && !contains(r.ConfigNames, e.name) {
				continue
			}
			v := e.value
			src := kmsg.ConfigSourceDynamicTopicConfig
			if e.isDefault {
				src = kmsg.ConfigSourceDefaultConfig
			}
			entry := kmsg.NewDescribeConfigsResponseResourceConfig()
			entry.Name = e.name
			entry.Value = &v
			entry.IsDefault = e.isDefault
			entry.Source = src
			entry.ConfigType = e.ctype
			rr.Configs = append(rr.Configs, entry)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return reply{resp: resp}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
