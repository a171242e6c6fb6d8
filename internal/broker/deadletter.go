package broker

import (
	"context"
	"strconv"

	"github.com/rosettamq/rosetta/internal/model"
)

// Retry and dead-letter topics, RocketMQ's delivery rules: a consumer
// group's messages that failed go to its retry topic %RETRY%<group> after
// a delay level, and once the group's attempts are spent to its dead-letter
// topic %DLQ%<group>. Every front-end uses these (remoting send-back, POP
// over remoting and gRPC), so the rules exist once.

// Properties of retried and dead-lettered messages.
const (
	HeaderRetryTopic       = "RETRY_TOPIC"
	HeaderOriginMessageID  = "ORIGIN_MESSAGE_ID"
	HeaderDLQOriginTopic   = "DLQ_ORIGIN_TOPIC"
	HeaderDLQOriginMessage = "DLQ_ORIGIN_MESSAGE_ID"
)

// RetryTopicPrefix starts the name of a group's retry topic.
const RetryTopicPrefix = "%RETRY%"

// DeadLetterTopicPrefix starts the name of a group's dead-letter topic.
const DeadLetterTopicPrefix = "%DLQ%"

// RetryTopicName is a group's retry topic (in public/default).
func RetryTopicName(group string) (model.TopicName, error) {
	return model.ParseTopicName(RetryTopicPrefix + group)
}

// DeadLetterTopicName is a group's dead-letter topic (in public/default).
func DeadLetterTopicName(group string) (model.TopicName, error) {
	return model.ParseTopicName(DeadLetterTopicPrefix + group)
}

// groupTopic returns a retry or dead-letter topic, creating it with one
// queue when missing (whatever the auto-creation setting: the broker makes
// them, as RocketMQ does).
func (b *Broker) groupTopic(ctx context.Context, name model.TopicName) (*Topic, error) {
	t, err := b.GetOrCreateTopic(ctx, name, 1, TopicConfig{})
	if err == nil && len(t.Queues) == 0 {
		// Made before this broker's group was added: it takes a queue.
		return b.GrowTopic(ctx, name, 1)
	}
	return t, err
}

// EnsureRetryTopic returns a group's retry topic, creating it when missing
// (RocketMQ makes it at a consumer's first heartbeat or route query).
func (b *Broker) EnsureRetryTopic(ctx context.Context, group string) (*Topic, error) {
	name, err := RetryTopicName(group)
	if err != nil {
		return nil, err
	}
	return b.groupTopic(ctx, name)
}

// MaxAttempts is how many times a group's message is delivered before it
// is dead-lettered: the group's retryMaxTimes (16 unless configured) plus
// the first delivery.
func (b *Broker) MaxAttempts(group string) int32 {
	cfg, _ := b.GroupConfig(group)
	return int32(cfg.RetryMaxTimes) + 1
}

// DeadLetter appends m to the group's dead-letter topic. origin, when set,
// is the topic it was consumed from: POP deliveries record it (with the
// message's unique id) as DLQ_ORIGIN_TOPIC / DLQ_ORIGIN_MESSAGE_ID, as
// RocketMQ 5 does.
func (b *Broker) DeadLetter(ctx context.Context, group string, origin *model.TopicName, m model.Message) error {
	name, err := DeadLetterTopicName(group)
	if err != nil {
		return err
	}
	t, err := b.groupTopic(ctx, name)
	if err != nil {
		return err
	}
	if origin != nil {
		id, _ := m.Header(HeaderUniqKey)
		m.Headers = append(withoutHeaders(m.Headers, HeaderDLQOriginTopic, HeaderDLQOriginMessage),
			model.Header{Key: HeaderDLQOriginTopic, Value: []byte(origin.Short())},
			model.Header{Key: HeaderDLQOriginMessage, Value: id})
	}
	offs, err := b.AppendMessages(ctx, t.Name, 0, []model.Message{m})
	if err == nil {
		b.traceMoved(ctx, origin, t, 0, offs[0], &m, TraceEvent{Kind: TraceDeadLettered, Group: group, Attempt: m.ReconsumeTimes})
	}
	return err
}

// RetryLater appends m to the group's retry topic, delivered after the
// delay level.
func (b *Broker) RetryLater(ctx context.Context, group string, m model.Message, level int) error {
	t, err := b.EnsureRetryTopic(ctx, group)
	if err != nil {
		return err
	}
	_, _, err = b.AppendDelayed(ctx, t.Name, 0, m, level)
	if err == nil {
		b.traceMoved(ctx, nil, t, 0, -1, &m, TraceEvent{Kind: TraceRetried, Group: group, Attempt: m.ReconsumeTimes,
			Detail: "to " + t.Name.Short() + " after delay level " + strconv.Itoa(level)})
	}
	return err
}
