package kafka

// IncrementalAlterConfigs (key 44), versions 0-1.
//
// Version notes: SET and DELETE work on every key; APPEND and SUBTRACT work
// on list values (cleanup.policy) as comma-separated lists.

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
)

func handleIncrementalAlterConfigs(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, r := range req.Resources {
		code, msg := rc.srv().alterResource(rc, r.ResourceType, r.ResourceName, req.ValidateOnly, func(c *broker.TopicConfig) error {
			for _, e := range r.Configs {
				var err error
				switch e.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					err = applyConfig(c, e.Name, e.Value)
				case kmsg.IncrementalAlterConfigOpDelete:
					err = applyConfig(c, e.Name, nil)
				case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
					err = applyListOp(c, e.Name, e.Value, e.Op == kmsg.IncrementalAlterConfigOpAppend)
				default:
					err = errInvalidOp
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		res := kmsg.NewIncrementalAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName, res.ErrorCode, res.ErrorMessage = r.ResourceType, r.ResourceName, code, msg
		resp.Resources = append(resp.Resources, res)
	}
	return reply{resp: resp}
}

var errInvalidOp = &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "unknown config operation"}

func applyListOp(c *broker.TopicConfig, name string, value *string, add bool) error {
	cur := ""
	for _, dc := range describeTopicConfig(c, nil) {
		if dc.name == name && !dc.isDefault {
			cur = dc.value
		}
	}
	var items []string
	if cur != "" {
		items = strings.Split(cur, ",")
	}
	v := ""
	if value != nil {
		v = *value
	}
	if add {
		if !contains(items, v) {
			items = append(items, v)
		}
	} else {
		kept := items[:0]
		for _, it := range items {
			if it != v {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return applyConfig(c, name, nil)
	}
	joined := strings.Join(items, ",")
	return applyConfig(c, name, &joined)
}
