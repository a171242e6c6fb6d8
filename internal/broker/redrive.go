package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rosettamq/rosetta/internal/model"
)

// Re-driving dead letters: an operator sends a group's dead-lettered
// messages back for another round — to their origin topic (every group
// subscribed there gets them again) or to the group's retry topic (only
// that group does). The dead-letter topic is a log: re-driven messages stay
// in it, and the answer says where the next range starts.

// DeadLetterOrigin is the topic a dead-lettered message was consumed from:
// DLQ_ORIGIN_TOPIC (POP deliveries), else RETRY_TOPIC (remoting send-back);
// empty when neither is known.
func DeadLetterOrigin(m *model.Message) string {
	if v, ok := m.Header(HeaderDLQOriginTopic); ok && len(v) > 0 {
		return string(v)
	}
	if v, ok := m.Header(HeaderRetryTopic); ok && len(v) > 0 {
		return string(v)
	}
	return ""
}

// RedriveOptions choose what to re-drive.
type RedriveOptions struct {
	// Offsets are the dead-letter queue offsets to re-drive; empty: the
	// range [From, To) (To 0: the end), at most Max messages (0: 10,000).
	Offsets  []model.QueueOffset
	From, To model.QueueOffset
	Max      int
	// ToRetry sends them to the group's retry topic instead of their
	// origin topic.
	ToRetry bool
}

// RedriveResult says what a re-drive did.
type RedriveResult struct {
	Redriven int                 `json:"redriven"`
	Skipped  []model.QueueOffset `json:"skipped,omitempty"` // no origin topic known, or it is gone
	Next     model.QueueOffset   `json:"next"`              // the offset after the last one looked at
}

// RedriveDeadLetters appends a group's dead-lettered messages again, with
// their keys, tags and properties (origin properties kept, retry count
// reset), to their origin topic or the group's retry topic.
func (b *Broker) RedriveDeadLetters(ctx context.Context, group string, opts RedriveOptions) (RedriveResult, error) {
	name, err := DeadLetterTopicName(group)
	if err != nil {
		return RedriveResult{}, err
	}
	dlq, err := b.Topic(name)
	if err != nil {
		return RedriveResult{}, err
	}
	if opts.Max <= 0 {
		opts.Max = 10_000
	}
	slices.Sort(opts.Offsets)
	start, hw, _, err := b.Offsets(name, 0)
	if err != nil {
		return RedriveResult{}, err
	}
	from, to := max(opts.From, start), hw
	if opts.To > 0 {
		to = min(opts.To, hw)
	}
	if len(opts.Offsets) > 0 {
		from, to = max(opts.Offsets[0], start), min(opts.Offsets[len(opts.Offsets)-1]+1, hw)
	}
	res := RedriveResult{Next: from}
	var retry *Topic
	if opts.ToRetry {
		if retry, err = b.EnsureRetryTopic(ctx, group); err != nil {
			return res, err
		}
	}
	q := dlq.Queues[0]
	for next := from; next < to && res.Redriven+len(res.Skipped) < opts.Max; {
		var batch []StoredMessage
		after, err := b.EachMessage(q, next, 256, func(sm *StoredMessage) bool {
			if sm.Offset >= to {
				return false
			}
			if len(opts.Offsets) == 0 || slices.Contains(opts.Offsets, sm.Offset) {
				batch = append(batch, *sm)
			}
			return res.Redriven+len(res.Skipped)+len(batch) < opts.Max
		})
		if err != nil {
			return res, err
		}
		for i := range batch {
			if err := b.redriveOne(ctx, group, retry, &batch[i], &res); err != nil {
				return res, err
			}
			res.Next = batch[i].Offset + 1
		}
		if after <= next {
			break
		}
		next = after
		if len(batch) == 0 {
			res.Next = min(after, to)
		}
	}
	return res, nil
}

func (b *Broker) redriveOne(ctx context.Context, group string, retry *Topic, sm *StoredMessage, res *RedriveResult) error {
	m := sm.Message
	m.ReconsumeTimes = 0
	restoreIndexKeys(&m)
	target := retry
	if target == nil {
		origin := DeadLetterOrigin(&m)
		if origin == "" || strings.HasPrefix(origin, "%RETRY%") {
			res.Skipped = append(res.Skipped, sm.Offset)
			return nil
		}
		// A RocketMQ client's namespaced name, ns%topic, is ns/topic here.
		if i := strings.IndexByte(origin, '%'); i > 0 {
			origin = origin[:i] + "/" + origin[i+1:]
		}
		name, err := model.ParseTopicName(origin)
		if err == nil {
			target, err = b.Topic(name)
		}
		if err != nil {
			res.Skipped = append(res.Skipped, sm.Offset)
			return nil
		}
	}
	m.Topic = target.Name
	index := int32(int(sm.Offset) % target.QueueCount())
	if _, err := b.AppendMessages(ctx, target.Name, index, []model.Message{m}); err != nil {
		return fmt.Errorf("re-drive %s dead letter %d to %s: %w", group, sm.Offset, target.Name.Short(), err)
	}
	res.Redriven++
	return nil
}
