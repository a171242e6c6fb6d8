package kafka

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// topicConfigKey is one Kafka topic config that maps onto Rosetta's topic
// configuration. Other keys are kept verbatim in TopicConfig.Extra.
type topicConfigKey struct {
	name  string
	def   string
	ctype kmsg.ConfigType
	get   func(c *broker.TopicConfig) (string, bool) // value, explicitly set
	set   func(c *broker.TopicConfig, v *string) error
}

func int64Key(name, def string, field func(c *broker.TopicConfig) *int64) topicConfigKey {
	return topicConfigKey{name: name, def: def, ctype: kmsg.ConfigTypeLong,
		get: func(c *broker.TopicConfig) (string, bool) {
			if v := *field(c); v != 0 {
				return strconv.FormatInt(v, 10), true
			}
			return def, false
		},
		set: func(c *broker.TopicConfig, v *string) error {
			if v == nil {
				*field(c) = 0
				return nil
			}
			n, err := strconv.ParseInt(*v, 10, 64)
			if err != nil || n < -1 {
				return fmt.Errorf("%w: %s=%q", model.ErrInvalidConfig, name, *v)
			}
			if n == 0 && name == "retention.ms" {
				n = 1 // 0 means "default" internally; Kafka's 0 is "delete at once"
			}
			*field(c) = n
			return nil
		}}
}

func stringKey(name, def string, field func(c *broker.TopicConfig) *string) topicConfigKey {
	return topicConfigKey{name: name, def: def, ctype: kmsg.ConfigTypeString,
		get: func(c *broker.TopicConfig) (string, bool) {
			if v := *field(c); v != "" {
				return v, true
			}
			return def, false
		},
		set: func(c *broker.TopicConfig, v *string) error {
			if v == nil {
				*field(c) = ""
				return nil
			}
			*field(c) = *v
			return nil
		}}
}

var topicConfigKeys = []topicConfigKey{
	int64Key("retention.ms", "-1", func(c *broker.TopicConfig) *int64 { return &c.RetentionMs }),
	int64Key("retention.bytes", "-1", func(c *broker.TopicConfig) *int64 { return &c.RetentionBytes }),
	{name: "max.message.bytes", def: "1048588", ctype: kmsg.ConfigTypeInt,
		get: func(c *broker.TopicConfig) (string, bool) {
			if c.MaxMessageBytes > 0 {
				return strconv.Itoa(int(c.MaxMessageBytes)), true
			}
			return "1048588", false
		},
		set: func(c *broker.TopicConfig, v *string) error {
			if v == nil {
				c.MaxMessageBytes = 0
				return nil
			}
			n, err := strconv.ParseInt(*v, 10, 32)
			if err != nil || n <= 0 {
				return fmt.Errorf("%w: max.message.bytes=%q", model.ErrInvalidConfig, *v)
			}
			c.MaxMessageBytes = int32(n)
			return nil
		}},
	stringKey("message.timestamp.type", "CreateTime", func(c *broker.TopicConfig) *string { return &c.TimestampType }),
	stringKey("cleanup.policy", "delete", func(c *broker.TopicConfig) *string { return &c.CleanupPolicy }),
	stringKey("rocketmq.message.type", "normal", func(c *broker.TopicConfig) *string { return &c.MessageType }),
	stringKey("rosetta.message.trace", "false", func(c *broker.TopicConfig) *string { return &c.MessageTrace }),
	// Tiering is the node's choice; a topic may only opt out.
	{name: "remote.storage.enable", def: "false", ctype: kmsg.ConfigTypeBoolean,
		get: func(c *broker.TopicConfig) (string, bool) { return c.RemoteStorage, c.RemoteStorage != "" },
		set: func(c *broker.TopicConfig, v *string) error {
			if v == nil {
				c.RemoteStorage = ""
				return nil
			}
			if !boolean(*v) {
				return fmt.Errorf("%w: remote.storage.enable=%q", model.ErrInvalidConfig, *v)
			}
			c.RemoteStorage = strings.ToLower(strings.TrimSpace(*v))
			return nil
		}},
}

func findConfigKey(name string) *topicConfigKey {
	for i := range topicConfigKeys {
		if topicConfigKeys[i].name == name {
			return &topicConfigKeys[i]
		}
	}
	return nil
}

// applyConfig sets (or, with a nil value, clears) one Kafka config. Names
// Kafka does not know, and values Kafka would not parse, are INVALID_CONFIG;
// known configs Rosetta does not enforce are validated and kept verbatim.
func applyConfig(c *broker.TopicConfig, name string, value *string) error {
	if k := findConfigKey(name); k != nil {
		return k.set(c, value)
	}
	check, known := unenforcedConfigs[name]
	if !known {
		return fmt.Errorf("%w: unknown topic config %q", model.ErrInvalidConfig, name)
	}
	if value != nil && !check(*value) {
		return fmt.Errorf("%w: %s=%q", model.ErrInvalidConfig, name, *value)
	}
	if value == nil {
		delete(c.Extra, name)
		return nil
	}
	if c.Extra == nil {
		c.Extra = map[string]string{}
	}
	c.Extra[name] = *value
	return nil
}

// describedConfig is one config entry as DescribeConfigs shows it.
type describedConfig struct {
	name, value string
	isDefault   bool
	ctype       kmsg.ConfigType
}

// describeTopicConfig lists a topic's configs, defaults included (the
// broker's own defaults where it has them).
func describeTopicConfig(c *broker.TopicConfig, defaults map[string]string) []describedConfig {
	var out []describedConfig
	for _, k := range topicConfigKeys {
		v, set := k.get(c)
		if d, ok := defaults[k.name]; ok && !set {
			v = d
		}
		out = append(out, describedConfig{name: k.name, value: v, isDefault: !set, ctype: k.ctype})
	}
	var extra []string
	for k := range c.Extra {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	for _, k := range extra {
		out = append(out, describedConfig{name: k, value: c.Extra[k], ctype: kmsg.ConfigTypeString})
	}
	return out
}

// brokerTopicDefaults are the topic config defaults the broker's own
// configuration sets (its retention, whether it tiers).
func brokerTopicDefaults(b *broker.Broker) map[string]string {
	ms, bytes := b.RetentionDefaults()
	return map[string]string{"retention.ms": strconv.FormatInt(ms, 10), "retention.bytes": strconv.FormatInt(bytes, 10),
		"remote.storage.enable": strconv.FormatBool(b.Engine().Tiered())}
}
