package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// GroupConfig is a consumer group's settings, as RocketMQ's subscription
// group config carries them. Groups without a stored config use
// DefaultGroupConfig.
type GroupConfig struct {
	Name string `json:"name"`
	// ConsumeEnable false makes the group's pulls fail (no permission).
	ConsumeEnable bool `json:"consumeEnable"`
	// ConsumeFromMinEnable starts a new group at the first message.
	ConsumeFromMinEnable bool `json:"consumeFromMinEnable"`
	// ConsumeBroadcastEnable allows broadcasting consumption.
	ConsumeBroadcastEnable bool `json:"consumeBroadcastEnable"`
	// ConsumeMessageOrderly marks a group that consumes in order.
	ConsumeMessageOrderly bool `json:"consumeMessageOrderly"`
	// RetryQueueNums is the queue count of the group's retry topic.
	RetryQueueNums int `json:"retryQueueNums"`
	// RetryMaxTimes is how often a message is retried before it is
	// dead-lettered, when the consumer does not say.
	RetryMaxTimes int `json:"retryMaxTimes"`
	// BrokerID and WhichBrokerWhenConsumeSlowly are kept as set (one node
	// serves every role).
	BrokerID                     int64 `json:"brokerId"`
	WhichBrokerWhenConsumeSlowly int64 `json:"whichBrokerWhenConsumeSlowly"`
	// NotifyConsumerIdsChangedEnable tells members when membership changes.
	NotifyConsumerIdsChangedEnable bool `json:"notifyConsumerIdsChangedEnable"`
	GroupSysFlag                   int  `json:"groupSysFlag"`
	ConsumeTimeoutMinute           int  `json:"consumeTimeoutMinute"`
	// Attributes are further settings kept as given.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// DefaultGroupConfig is the configuration of a group nobody configured
// (RocketMQ's subscription group defaults).
func DefaultGroupConfig(name string) GroupConfig {
	return GroupConfig{Name: name, ConsumeEnable: true, ConsumeFromMinEnable: true, ConsumeBroadcastEnable: true,
		RetryQueueNums: 1, RetryMaxTimes: 16, WhichBrokerWhenConsumeSlowly: 1, NotifyConsumerIdsChangedEnable: true,
		ConsumeTimeoutMinute: 15}
}

const groupConfigPrefix = "groupconfigs/"

// groupConfigs caches the stored group configurations.
type groupConfigs struct {
	mu      sync.RWMutex
	configs map[string]GroupConfig
}

func (b *Broker) loadGroupConfigs(ctx context.Context) (int64, error) {
	kvs, rev, err := b.meta.ListRev(ctx, groupConfigPrefix)
	if err != nil {
		return 0, err
	}
	configs := make(map[string]GroupConfig, len(kvs))
	for _, kv := range kvs {
		var c GroupConfig
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return 0, fmt.Errorf("group config %s: %w", kv.Key, err)
		}
		configs[c.Name] = c
	}
	b.groupCfg.mu.Lock()
	b.groupCfg.configs = configs
	b.groupCfg.mu.Unlock()
	return rev, nil
}

// watchGroupConfigs applies group configurations changed through any
// node (another replication group's broker) until ctx ends.
func (b *Broker) watchGroupConfigs(ctx context.Context, rev int64) {
	b.followPrefix(ctx, groupConfigPrefix, rev, func(ev meta.Event) {
		name := strings.TrimPrefix(ev.Key, groupConfigPrefix)
		var c GroupConfig
		if !ev.Deleted {
			if err := json.Unmarshal(ev.Value, &c); err != nil {
				b.log.Warn("unreadable group config skipped", "key", ev.Key, "err", err)
				return
			}
		}
		b.groupCfg.mu.Lock()
		if ev.Deleted {
			delete(b.groupCfg.configs, name)
		} else {
			b.groupCfg.configs[c.Name] = c
		}
		b.groupCfg.mu.Unlock()
	}, b.loadGroupConfigs)
}

// SetGroupConfig stores a group's configuration, replacing any before it.
func (b *Broker) SetGroupConfig(ctx context.Context, c GroupConfig) error {
	if c.Name == "" || strings.ContainsAny(c.Name, "/\x00") {
		return fmt.Errorf("%w: group name %q", model.ErrInvalidConfig, c.Name)
	}
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := meta.Put(ctx, b.meta, groupConfigPrefix+c.Name, v); err != nil {
		return err
	}
	b.groupCfg.mu.Lock()
	b.groupCfg.configs[c.Name] = c
	b.groupCfg.mu.Unlock()
	return nil
}

// DeleteGroupConfig removes a group's stored configuration (it falls back to
// the defaults).
func (b *Broker) DeleteGroupConfig(ctx context.Context, name string) error {
	if err := meta.Delete(ctx, b.meta, groupConfigPrefix+name); err != nil {
		return err
	}
	b.groupCfg.mu.Lock()
	delete(b.groupCfg.configs, name)
	b.groupCfg.mu.Unlock()
	return nil
}

// GroupConfig returns a group's configuration and whether it was stored
// (the defaults otherwise).
func (b *Broker) GroupConfig(name string) (GroupConfig, bool) {
	b.groupCfg.mu.RLock()
	c, ok := b.groupCfg.configs[name]
	b.groupCfg.mu.RUnlock()
	if !ok {
		return DefaultGroupConfig(name), false
	}
	return c, true
}

// GroupConfigs returns every stored group configuration, by name.
func (b *Broker) GroupConfigs() []GroupConfig {
	b.groupCfg.mu.RLock()
	out := make([]GroupConfig, 0, len(b.groupCfg.configs))
	for _, c := range b.groupCfg.configs {
		out = append(out, c)
	}
	b.groupCfg.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
