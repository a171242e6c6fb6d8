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
		}, func(cfg map[string]string) error {
			for _, e := range r.Configs {
				switch e.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					if e.Value == nil {
						return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "null value for SET of " + e.Name}
					}
					cfg[e.Name] = *e.Value
				case kmsg.IncrementalAlterConfigOpDelete:
					delete(cfg, e.Name)
				case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
					if k, ok := dynamicBrokerConfigs[e.Name]; !ok || k.ctype != kmsg.ConfigTypeList {
						return &kafkaCodeError{code: kerr.InvalidConfig.Code, msg: e.Name + " is not a list config"}
					}
					v := ""
					if e.Value != nil {
						v = *e.Value
					}
					cfg[e.Name] = listChange(rc.srv().brokerListValue(r.ResourceName, cfg, e.Name), v, e.Op == kmsg.IncrementalAlterConfigOpAppend)
				default:
					return errInvalidOp
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
	v := ""
	if value != nil {
		v = *value
	}
	joined := listChange(cur, v, add)
	if joined == "" {
		return applyConfig(c, name, nil)
	}
	return applyConfig(c, name, &joined)
}

// listChange appends the comma-separated items of v to the list cur (those
// not in it yet), or removes them from it.
func listChange(cur, v string, add bool) string {
	var items []string
	if cur != "" {
		items = strings.Split(cur, ",")
	}
	for _, it := range strings.Split(v, ",") {
		it = strings.TrimSpace(it)
		if it == "" {
			continue
		}
		if add {
			if !contains(items, it) {
				items = append(items, it)
			}
			continue
		}
		kept := items[:0]
		for _, x := range items {
			if x != it {
				kept = append(kept, x)
			}
		}
		items = kept
	}
	return strings.Join(items, ",")
}
