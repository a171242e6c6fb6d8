package grpcv5

// POP consumption: ReceiveMessage hands messages out through the POP engine
// (a receipt handle, an invisible time, the attempt count) and streams
// status OK then the messages, or MESSAGE_NOT_FOUND after the long poll;
// AckMessage, ChangeInvisibleDuration (a fresh handle) and
// ForwardMessageToDeadLetterQueue take receipt handles. A message handed
// out more than its group's retryMaxTimes+1 times goes to %DLQ%<group>
// instead. Simple consumers set the invisible time; push consumers ask for
// auto-renewal (renew.go).

import (
	"context"
	"errors"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/filter"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/telemetry"
)

// Receive limits, as RocketMQ's proxy applies them.
const (
	minInvisible       = 10 * time.Second
	maxInvisible       = 12 * time.Hour
	autoRenewInvisible = renewInvisible
	maxBatch           = 1024
)

// ReceiveMessage pops messages of a group.
func (s *Server) ReceiveMessage(req *v2.ReceiveMessageRequest, stream v2.MessagingService_ReceiveMessageServer) error {
	ctx := stream.Context()
	fail := func(code v2.Code, msg string) error {
		return stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: &v2.Status{Code: code, Message: msg}}})
	}
	if s.pop == nil {
		return fail(v2.Code_NOT_IMPLEMENTED, "POP is not available")
	}
	group := groupName(req.GetGroup())
	if req.GetGroup().GetName() == "" {
		return fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "group required")
	}
	mq := req.GetMessageQueue()
	name, err := topicName(mq.GetTopic())
	if err != nil {
		return stream.Send(statusItem(err))
	}
	t, err := s.broker.Topic(name)
	if err != nil {
		return stream.Send(statusItem(err))
	}
	// The queue names the broker only: every queue of the topic is popped,
	// starting at a different one each time (as RocketMQ's proxy pops).
	if id := mq.GetId(); id < -1 || int(id) >= len(t.Queues) {
		return fail(v2.Code_NOT_FOUND, "no such queue")
	}
	queues := make([]model.QueueID, 0, len(t.Queues))
	start := int(s.roundRobin.Add(1))
	for i := range t.Queues {
		queues = append(queues, t.Queues[(start+i)%len(t.Queues)])
	}
	match, err := messageFilter(req.GetFilterExpression())
	if err != nil {
		return fail(v2.Code_ILLEGAL_FILTER_EXPRESSION, err.Error())
	}
	invisible := autoRenewInvisible
	if d := req.GetInvisibleDuration(); d != nil {
		invisible = d.AsDuration()
		if invisible < minInvisible || invisible > maxInvisible {
			return fail(v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible duration must be within [10s, 12h]")
		}
	} else if !req.GetAutoRenew() {
		return fail(v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible duration required")
	}
	batch := int(req.GetBatchSize())
	if batch <= 0 || batch > maxBatch {
		batch = receiveBatchSize
	}
	cfg := s.groupConfig(req.GetGroup())
	poll := longPollingTimeout
	if d := req.GetLongPollingTimeout(); d != nil && d.AsDuration() > 0 {
		poll = min(d.AsDuration(), longPollingTimeout)
	}
	if dl, ok := ctx.Deadline(); ok {
		poll = min(poll, time.Until(dl)-500*time.Millisecond)
	}
	var got []pop.Delivery
	received := time.Now()
	// A poll parked when the servers stop answers as one that found nothing
	// (the client asks again, on a new connection).
	pctx, stopPoll := s.untilStopped(ctx)
	defer stopPoll()
	found, err := s.broker.PollTopic(pctx, t, poll, func() (bool, error) {
		var err error
		got, err = s.pop.ReceiveLive(broker.WithTraceSource(ctx, "grpc", clientID(ctx)), group, queues, batch, invisible, cfg.ConsumeMessageOrderly, match)
		return len(got) > 0, err
	})
	switch {
	case err != nil:
		return stream.Send(statusItem(err))
	case !found:
		return fail(v2.Code_MESSAGE_NOT_FOUND, "no new message")
	}
	if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: okStatus()}}); err != nil {
		return err
	}
	client := clientID(ctx)
	bytes := 0
	var spanned telemetry.Delivered
	for i := range got {
		if s.opts.Tracer.Enabled() {
			tp, _ := got[i].Message.Header(telemetry.HeaderTraceParent)
			spanned.Add(tp)
		}
		if req.GetInvisibleDuration() == nil && req.GetAutoRenew() {
			s.renew.add(client, group, got[i].Handle)
		}
		msg := s.deliveryProto(&got[i], mq.GetTopic(), t, invisible)
		bytes += len(msg.GetBody())
		if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Message{Message: msg}}); err != nil {
			return err
		}
	}
	if s.opts.Tracer.Enabled() {
		s.opts.Tracer.Deliver(ctx, "receive "+mq.GetTopic().GetName(), received, &spanned,
			attribute.String("messaging.system", "rocketmq"), attribute.String("messaging.destination.name", mq.GetTopic().GetName()),
			attribute.String("messaging.consumer.group.name", group))
	}
	// A namespace over its fetch rate: the call ends late, which paces the
	// consumer's next receive.
	if q := s.opts.Quotas; q.Active() {
		quota.Wait(ctx, q.Charge(t.Name, callUser(ctx), "", quota.Fetch, bytes))
	}
	return nil
}

// deliveryProto lays out a delivery for the client.
func (s *Server) deliveryProto(d *pop.Delivery, topic *v2.Resource, t *broker.Topic, invisible time.Duration) *v2.Message {
	ref, _ := s.broker.QueueByID(d.Queue)
	m := toProto(&d.Message, topic, storedMeta{queueID: ref.Index, offset: d.Offset, storeTime: d.StoreTime})
	handle := d.Handle.String()
	attempt := d.Attempt
	m.SystemProperties.ReceiptHandle = &handle
	m.SystemProperties.DeliveryAttempt = &attempt
	m.SystemProperties.InvisibleDuration = durationpb.New(invisible)
	return m
}

// messageFilter builds a receive's filter (nil: every message).
func messageFilter(f *v2.FilterExpression) (pop.Filter, error) {
	if f == nil {
		return nil, nil
	}
	if f.GetType() == v2.FilterType_SQL {
		e, err := filter.Compile(f.GetExpression())
		if err != nil {
			return nil, err
		}
		return func(m *model.Message) bool { return e.Match(filter.MessageProperties(m)) }, nil
	}
	tags := filter.TagSet(f.GetExpression())
	if tags == nil {
		return nil, nil
	}
	return func(m *model.Message) bool { return tags[m.Tags] }, nil
}

func statusItem(err error) *v2.ReceiveMessageResponse {
	return &v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: status(err)}}
}

// AckMessage acknowledges received messages by receipt handle.
func (s *Server) AckMessage(ctx context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	resp := &v2.AckMessageResponse{}
	if s.pop == nil {
		resp.Status = &v2.Status{Code: v2.Code_NOT_IMPLEMENTED, Message: "POP is not available"}
		return resp, nil
	}
	group := groupName(req.GetGroup())
	failed := 0
	for _, e := range req.GetEntries() {
		st := okStatus()
		h, err := pop.ParseHandle(e.GetReceiptHandle())
		if err == nil {
			s.renew.remove(h)
			err = s.pop.Ack(broker.WithTraceSource(ctx, "grpc", clientID(ctx)), group, h)
		}
		if err != nil {
			st = handleStatus(err)
			failed++
		}
		resp.Entries = append(resp.Entries, &v2.AckMessageResultEntry{MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: st})
	}
	switch {
	case failed == 0:
		resp.Status = okStatus()
	case failed == len(resp.Entries):
		resp.Status = resp.Entries[0].Status
	default:
		resp.Status = &v2.Status{Code: v2.Code_MULTIPLE_RESULTS, Message: "some entries failed"}
	}
	return resp, nil
}

// ChangeInvisibleDuration postpones a received message and answers a new
// receipt handle.
func (s *Server) ChangeInvisibleDuration(ctx context.Context, req *v2.ChangeInvisibleDurationRequest) (*v2.ChangeInvisibleDurationResponse, error) {
	if s.pop == nil {
		return &v2.ChangeInvisibleDurationResponse{Status: &v2.Status{Code: v2.Code_NOT_IMPLEMENTED, Message: "POP is not available"}}, nil
	}
	h, err := pop.ParseHandle(req.GetReceiptHandle())
	if err != nil {
		return &v2.ChangeInvisibleDurationResponse{Status: handleStatus(err)}, nil
	}
	s.renew.remove(h)
	d := req.GetInvisibleDuration().AsDuration()
	if d < 0 || d > maxInvisible {
		return &v2.ChangeInvisibleDurationResponse{Status: &v2.Status{Code: v2.Code_ILLEGAL_INVISIBLE_TIME, Message: "invisible duration out of range"}}, nil
	}
	nh, err := s.pop.ChangeInvisible(ctx, groupName(req.GetGroup()), h, d)
	if err != nil {
		return &v2.ChangeInvisibleDurationResponse{Status: handleStatus(err)}, nil
	}
	return &v2.ChangeInvisibleDurationResponse{Status: okStatus(), ReceiptHandle: nh.String()}, nil
}

// ForwardMessageToDeadLetterQueue moves a received message to the group's
// dead-letter topic (clients do so for FIFO messages past their attempts).
func (s *Server) ForwardMessageToDeadLetterQueue(ctx context.Context, req *v2.ForwardMessageToDeadLetterQueueRequest) (*v2.ForwardMessageToDeadLetterQueueResponse, error) {
	if s.pop == nil {
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: &v2.Status{Code: v2.Code_NOT_IMPLEMENTED, Message: "POP is not available"}}, nil
	}
	h, err := pop.ParseHandle(req.GetReceiptHandle())
	if err != nil {
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: handleStatus(err)}, nil
	}
	s.renew.remove(h)
	group := groupName(req.GetGroup())
	d, err := s.pop.Lookup(group, h)
	if err != nil {
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: handleStatus(err)}, nil
	}
	if _, err = topicName(req.GetTopic()); err == nil {
		err = s.pop.DeadLetter(broker.WithTraceSource(ctx, "grpc", clientID(ctx)), group, &d)
	}
	return &v2.ForwardMessageToDeadLetterQueueResponse{Status: handleStatus(err)}, nil
}

// handleStatus maps receipt-handle errors.
func handleStatus(err error) *v2.Status {
	if errors.Is(err, pop.ErrBadHandle) || errors.Is(err, pop.ErrStaleHandle) {
		return &v2.Status{Code: v2.Code_INVALID_RECEIPT_HANDLE, Message: err.Error()}
	}
	return status(err)
}
