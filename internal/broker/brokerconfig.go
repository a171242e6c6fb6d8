package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// Dynamic broker configs are Kafka's dynamically updatable broker settings
// (KIP-226): one map per node id, and one under the empty name for the
// cluster-wide default, kept in the metadata store and watched, so that a
// change made through any node applies on every node. The broker applies
// the keys that mean something here (log.retention.*); the others are
// kept and described as set.
const brokerConfigPrefix = "brokerconfigs/"

// brokerConfigDefault is the metadata key suffix of the cluster-wide
// default (Kafka's empty resource name).
const brokerConfigDefault = "default"

// dynamicConfigs caches the stored dynamic broker configs.
type dynamicConfigs struct {
	mu         sync.RWMutex
	byResource map[string]map[string]string // "" = cluster-wide default
}

func brokerConfigKey(resource string) string {
	if resource == "" {
		return brokerConfigPrefix + brokerConfigDefault
	}
	return brokerConfigPrefix + resource
}

func brokerConfigResource(key string) string {
	r := strings.TrimPrefix(key, brokerConfigPrefix)
	if r == brokerConfigDefault {
		return ""
	}
	return r
}

// loadBrokerConfigs reads every stored dynamic broker config and returns
// the revision the listing reflects.
func (b *Broker) loadBrokerConfigs(ctx context.Context) (int64, error) {
	kvs, rev, err := b.meta.ListRev(ctx, brokerConfigPrefix)
	if err != nil {
		return 0, err
	}
	all := make(map[string]map[string]string, len(kvs))
	for _, kv := range kvs {
		var m map[string]string
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			b.log.Warn("unreadable dynamic broker config skipped", "key", kv.Key, "err", err)
			continue
		}
		all[brokerConfigResource(kv.Key)] = m
	}
	b.dynCfg.mu.Lock()
	b.dynCfg.byResource = all
	b.dynCfg.mu.Unlock()
	return rev, nil
}

// watchBrokerConfigs applies changes made through any node until ctx ends.
func (b *Broker) watchBrokerConfigs(ctx context.Context, rev int64) {
	b.followPrefix(ctx, brokerConfigPrefix, rev, func(ev meta.Event) {
		resource := brokerConfigResource(ev.Key)
		var m map[string]string
		if !ev.Deleted {
			if err := json.Unmarshal(ev.Value, &m); err != nil {
				b.log.Warn("unreadable dynamic broker config skipped", "key", ev.Key, "err", err)
				return
			}
		}
		b.dynCfg.mu.Lock()
		if m == nil {
			delete(b.dynCfg.byResource, resource)
		} else {
			b.dynCfg.byResource[resource] = m
		}
		b.dynCfg.mu.Unlock()
	}, b.loadBrokerConfigs)
}

// BrokerConfigs returns the dynamic configs stored for resource: a node id,
// or "" for the cluster-wide default.
func (b *Broker) BrokerConfigs(resource string) map[string]string {
	b.dynCfg.mu.RLock()
	defer b.dynCfg.mu.RUnlock()
	return maps.Clone(b.dynCfg.byResource[resource])
}

// SetBrokerConfigs replaces the dynamic configs of resource (a node id, or
// "" for the cluster-wide default); an empty map removes them. Callers
// validate names and values.
func (b *Broker) SetBrokerConfigs(ctx context.Context, resource string, cfg map[string]string) error {
	if resource != "" {
		if id, err := strconv.Atoi(resource); err != nil || id < 0 {
			return fmt.Errorf("%w: broker resource %q", model.ErrInvalidConfig, resource)
		}
	}
	key := brokerConfigKey(resource)
	if len(cfg) == 0 {
		if err := meta.Delete(ctx, b.meta, key); err != nil {
			return err
		}
	} else {
		v, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		if err := meta.Put(ctx, b.meta, key, v); err != nil {
			return err
		}
	}
	b.dynCfg.mu.Lock()
	if len(cfg) == 0 {
		delete(b.dynCfg.byResource, resource)
	} else {
		b.dynCfg.byResource[resource] = maps.Clone(cfg)
	}
	b.dynCfg.mu.Unlock()
	return nil
}

// DynamicBrokerConfig returns the value of a dynamic config in effect on
// node (its own, else the cluster-wide default) and which of them set it.
func (b *Broker) DynamicBrokerConfig(node model.NodeID, name string) (value string, perNode, ok bool) {
	b.dynCfg.mu.RLock()
	defer b.dynCfg.mu.RUnlock()
	if v, ok := b.dynCfg.byResource[strconv.Itoa(int(node))][name]; ok {
		return v, true, true
	}
	v, ok := b.dynCfg.byResource[""][name]
	return v, false, ok
}

// retentionDefaults are the broker-wide retention defaults in effect:
// log.retention.ms, .minutes or .hours (first set wins, as in Kafka) and
// log.retention.bytes when set dynamically, else the static options. Zero
// means none.
func (b *Broker) retentionDefaults() (time.Duration, int64) {
	retention, bytes := b.opts.Retention, b.opts.RetentionBytes
	for _, k := range []struct {
		name string
		unit time.Duration
	}{{"log.retention.ms", time.Millisecond}, {"log.retention.minutes", time.Minute}, {"log.retention.hours", time.Hour}} {
		if v, _, ok := b.DynamicBrokerConfig(b.engine.Identity().NodeID, k.name); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				retention = max(time.Duration(n)*k.unit, 0) // -1: forever
				break
			}
		}
	}
	if v, _, ok := b.DynamicBrokerConfig(b.engine.Identity().NodeID, "log.retention.bytes"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			bytes = max(n, 0)
		}
	}
	return retention, bytes
}

// StaticRetentionDefaults are the retention defaults the node was started
// with (zero: none), before any dynamic broker config.
func (b *Broker) StaticRetentionDefaults() (time.Duration, int64) {
	return b.opts.Retention, b.opts.RetentionBytes
}
