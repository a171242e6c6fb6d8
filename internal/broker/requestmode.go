package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// RequestMode is how a RocketMQ consumer group reads a topic when the
// broker balances its queues (RocketMQ's message request mode): "PULL"
// (queues divided among the members) or "POP" (members pop; with
// PopShareQueueNum 0 every member pops every queue).
type RequestMode struct {
	Mode             string `json:"mode"`
	PopShareQueueNum int    `json:"popShareQueueNum"`
}

// Request modes.
const (
	RequestModePull = "PULL"
	RequestModePop  = "POP"
)

const requestModePrefix = "requestmodes/"

// requestModes caches the stored request modes by group, then topic.
type requestModes struct {
	mu    sync.RWMutex
	modes map[string]map[model.TopicName]RequestMode
}

func (b *Broker) loadRequestModes(ctx context.Context) error {
	kvs, err := b.meta.List(ctx, requestModePrefix)
	if err != nil {
		return err
	}
	b.reqModes.modes = map[string]map[model.TopicName]RequestMode{}
	for _, kv := range kvs {
		group, name, _ := strings.Cut(strings.TrimPrefix(kv.Key, requestModePrefix), "/")
		topic, err := model.ParseTopicName(name)
		var m RequestMode
		if err == nil {
			err = json.Unmarshal(kv.Value, &m)
		}
		if err != nil {
			return fmt.Errorf("request mode %s: %w", kv.Key, err)
		}
		b.reqModes.set(group, topic, m)
	}
	return nil
}

func (r *requestModes) set(group string, topic model.TopicName, m RequestMode) {
	if r.modes[group] == nil {
		r.modes[group] = map[model.TopicName]RequestMode{}
	}
	r.modes[group][topic] = m
}

// SetRequestMode stores how group reads topic.
func (b *Broker) SetRequestMode(ctx context.Context, group string, topic model.TopicName, m RequestMode) error {
	if group == "" || strings.ContainsAny(group, "/\x00") || (m.Mode != RequestModePull && m.Mode != RequestModePop) {
		return fmt.Errorf("%w: request mode %q for group %q", model.ErrInvalidConfig, m.Mode, group)
	}
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := meta.Put(ctx, b.meta, requestModePrefix+group+"/"+topic.String(), v); err != nil {
		return err
	}
	b.reqModes.mu.Lock()
	b.reqModes.set(group, topic, m)
	b.reqModes.mu.Unlock()
	return nil
}

// RequestModeOf returns how group reads topic (PULL unless set).
func (b *Broker) RequestModeOf(group string, topic model.TopicName) RequestMode {
	b.reqModes.mu.RLock()
	defer b.reqModes.mu.RUnlock()
	if m, ok := b.reqModes.modes[group][topic]; ok {
		return m
	}
	return RequestMode{Mode: RequestModePull}
}
