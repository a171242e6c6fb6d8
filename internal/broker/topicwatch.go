package broker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// watchTopics follows the topics the brokers of other replication groups
// create, grow, reconfigure and delete (each group's broker makes its own
// queues of a topic), until ctx ends.
func (b *Broker) watchTopics(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range b.meta.WatchFrom(ctx, "topics/", rev) {
			if ev.Compacted {
				break
			}
			rev = ev.Revision
			if err := b.applyTopicEvent(ctx, ev); err != nil {
				b.log.Warn("applying a topic change", "key", ev.Key, "err", err)
			}
		}
		if ctx.Err() != nil {
			return
		}
		// Cut (slow, compacted or the store's leader lost): re-read.
		var err error
		if rev, err = b.reconcileTopics(ctx); err != nil {
			b.log.Warn("reloading topics", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// applyTopicEvent applies one change of a topic's key.
func (b *Broker) applyTopicEvent(ctx context.Context, ev meta.Event) error {
	if ev.Deleted {
		name, err := model.ParseTopicName(strings.TrimPrefix(ev.Key, "topics/"))
		if err != nil {
			return err
		}
		b.topicMu.Lock()
		defer b.topicMu.Unlock()
		b.forgetTopicLocked(ctx, name)
		return nil
	}
	t, err := b.decodeTopic(ev.KV)
	if err != nil {
		return err
	}
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	return b.adoptTopicLocked(ctx, t)
}

// decodeTopic reads a stored topic, with this broker's view of its queues.
func (b *Broker) decodeTopic(kv meta.KV) (*Topic, error) {
	var t Topic
	if err := json.Unmarshal(kv.Value, &t); err != nil {
		return nil, err
	}
	var err error
	if t.Name, err = model.ParseTopicName(t.FullName); err != nil {
		return nil, err
	}
	t.revision = kv.Revision
	b.view(&t)
	if v, ok := t.Config.Extra["remote.storage.enable"]; ok {
		// Stored verbatim before tiering read it.
		if t.Config.RemoteStorage == "" {
			t.Config.RemoteStorage = strings.ToLower(strings.TrimSpace(v))
		}
		delete(t.Config.Extra, "remote.storage.enable")
	}
	return &t, nil
}

// adoptTopicLocked takes a topic another broker stored (made or changed),
// making this group's new queues of it; a version this broker already has
// (its own write) is skipped.
func (b *Broker) adoptTopicLocked(ctx context.Context, t *Topic) error {
	old, ok := b.topics[t.Name]
	if ok && old.revision >= t.revision {
		return nil
	}
	if ok && old.ID != t.ID { // deleted and made again meanwhile
		b.forgetTopicLocked(ctx, t.Name)
		ok = false
	}
	have := 0
	if ok {
		have = len(old.Queues)
	}
	if have < len(t.Queues) {
		if err := b.engine.CreateQueues(ctx, t.Queues[have:]); err != nil {
			return err
		}
	}
	if ok {
		for _, id := range old.Guests {
			if !slices.Contains(t.Guests, id) {
				delete(b.byQueue, id) // moved on
			}
		}
	}
	b.indexTopicLocked(t)
	b.topicsVersion.Add(1)
	return nil
}

// forgetTopicLocked drops a deleted topic (by this broker or another
// group's) and this group's queues of it.
func (b *Broker) forgetTopicLocked(ctx context.Context, name model.TopicName) {
	t, ok := b.topics[name]
	if !ok {
		return
	}
	delete(b.topics, name)
	delete(b.byID, t.ID)
	b.topicsVersion.Add(1)
	for _, id := range slices.Concat(t.Queues, t.Guests, t.pieces) {
		delete(b.byQueue, id)
		if err := b.engine.DeleteQueue(ctx, id); err != nil && !errors.Is(err, model.ErrUnknownQueue) {
			b.log.Warn("delete queue", "topic", name.String(), "queue", id, "err", err)
		}
	}
}

// reconcileTopics re-reads every topic after the watch was cut, adopting
// what changed and forgetting what is gone; it returns the revision read.
func (b *Broker) reconcileTopics(ctx context.Context) (int64, error) {
	kvs, rev, err := b.meta.ListRev(ctx, "topics/")
	if err != nil {
		return 0, err
	}
	seen := map[model.TopicName]bool{}
	var errs []error
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	for _, kv := range kvs {
		t, err := b.decodeTopic(kv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen[t.Name] = true
		errs = append(errs, b.adoptTopicLocked(ctx, t))
	}
	for name := range b.topics {
		if !seen[name] {
			b.forgetTopicLocked(ctx, name)
		}
	}
	return rev, errors.Join(errs...)
}

// adoptStoredLocked reads a topic's stored version and adopts it (after a
// write lost a race with another group's broker).
func (b *Broker) adoptStoredLocked(ctx context.Context, name model.TopicName) error {
	kv, err := b.meta.Get(ctx, topicKey(name))
	if errors.Is(err, meta.ErrNotFound) {
		b.forgetTopicLocked(ctx, name)
		return nil
	}
	if err != nil {
		return err
	}
	t, err := b.decodeTopic(kv)
	if err != nil {
		return err
	}
	return b.adoptTopicLocked(ctx, t)
}

// dropQueues deletes storage queues a lost write had made.
func (b *Broker) dropQueues(ctx context.Context, ids []model.QueueID) {
	for _, id := range ids {
		if _, owned := b.byQueue[id]; owned {
			continue
		}
		if err := b.engine.DeleteQueue(ctx, id); err != nil && !errors.Is(err, model.ErrUnknownQueue) {
			b.log.Warn("delete queue", "queue", id, "err", err)
		}
	}
}
