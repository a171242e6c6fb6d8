package grpcv5

// Telemetry: the client sends its settings first and the server answers
// with the effective settings (the client blocks its start-up until it
// gets them): producers get the largest body size and a retry policy;
// consumers their group's retry policy (attempts = retryMaxTimes + 1,
// back-off from the broker's delay levels from level 3 on, as RocketMQ
// retries), FIFO from the group's consumeMessageOrderly, the batch size
// and the long-polling timeout. Thread-stack and verify-message results
// from the client are logged.

import (
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Consumer defaults the settings answer carries (RocketMQ's proxy values).
const (
	receiveBatchSize   = 32
	longPollingTimeout = 20 * time.Second
)

// Telemetry serves one client's telemetry stream.
func (s *Server) Telemetry(stream v2.MessagingService_TelemetryServer) error {
	c := &client{id: clientID(stream.Context()), stream: stream}
	if p, ok := peer.FromContext(stream.Context()); ok {
		c.addr = p.Addr.String()
	}
	s.clients.add(c)
	defer s.clients.remove(c)
	// The stream ends when the client goes away or when the servers stop
	// (the client opens a new one), which would otherwise wait for it.
	ctx, stop := s.untilStopped(stream.Context())
	defer stop()
	cmds := make(chan *v2.TelemetryCommand)
	go func() { // ends with the stream, once the handler returns
		for {
			cmd, err := stream.Recv()
			if err != nil {
				stop()
				return
			}
			select {
			case cmds <- cmd:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var cmd *v2.TelemetryCommand
		select {
		case cmd = <-cmds:
		case <-ctx.Done():
			return nil
		}
		switch x := cmd.GetCommand().(type) {
		case *v2.TelemetryCommand_Settings:
			st := s.effectiveSettings(x.Settings)
			c.mu.Lock()
			c.settings = st
			c.mu.Unlock()
			if err := c.send(&v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_Settings{Settings: st}}); err != nil {
				return nil
			}
		case *v2.TelemetryCommand_ThreadStackTrace:
			s.log.Info("client thread stack", "client", c.id, "nonce", x.ThreadStackTrace.GetNonce())
		case *v2.TelemetryCommand_VerifyMessageResult:
			s.log.Info("client verify-message result", "client", c.id, "nonce", x.VerifyMessageResult.GetNonce(), "status", cmd.GetStatus().GetCode().String())
		default:
			s.log.Debug("telemetry command ignored", "client", c.id)
		}
	}
}

// effectiveSettings merges a client's settings with the server's values.
func (s *Server) effectiveSettings(in *v2.Settings) *v2.Settings {
	st := &v2.Settings{ClientType: in.ClientType, AccessPoint: in.AccessPoint, RequestTimeout: in.RequestTimeout,
		UserAgent: in.UserAgent, Metric: &v2.Metric{On: false}}
	switch ps := in.GetPubSub().(type) {
	case *v2.Settings_Publishing:
		st.PubSub = &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: ps.Publishing.GetTopics(),
			MaxBodySize: s.opts.MaxBodyBytes, ValidateMessageType: true}}
		st.BackoffPolicy = &v2.RetryPolicy{MaxAttempts: 3, Strategy: &v2.RetryPolicy_ExponentialBackoff{
			ExponentialBackoff: &v2.ExponentialBackoff{Initial: durationpb.New(10 * time.Millisecond),
				Max: durationpb.New(time.Second), Multiplier: 2}}}
	case *v2.Settings_Subscription:
		group := ps.Subscription.GetGroup().GetName()
		cfg := s.groupConfig(ps.Subscription.GetGroup())
		fifo := cfg.ConsumeMessageOrderly
		batch := int32(receiveBatchSize)
		if b := ps.Subscription.GetReceiveBatchSize(); b > 0 {
			batch = b
		}
		st.PubSub = &v2.Settings_Subscription{Subscription: &v2.Subscription{Group: ps.Subscription.GetGroup(),
			Subscriptions: ps.Subscription.GetSubscriptions(), Fifo: &fifo, ReceiveBatchSize: &batch,
			LongPollingTimeout: durationpb.New(longPollingTimeout)}}
		st.BackoffPolicy = s.retryPolicy(cfg.RetryMaxTimes)
		_ = group
	}
	return st
}

// retryPolicy is a consumer group's redelivery policy: retryMaxTimes
// retries after the first attempt, backing off along the delay levels from
// level 3 (10 s by default), as RocketMQ's retries do.
func (s *Server) retryPolicy(retryMaxTimes int) *v2.RetryPolicy {
	levels := s.broker.DelayLevels()
	var next []*durationpb.Duration
	for i := 2; i < len(levels); i++ {
		next = append(next, durationpb.New(levels[i]))
	}
	if len(next) == 0 {
		next = []*durationpb.Duration{durationpb.New(10 * time.Second)}
	}
	return &v2.RetryPolicy{MaxAttempts: int32(retryMaxTimes) + 1,
		Strategy: &v2.RetryPolicy_CustomizedBackoff{CustomizedBackoff: &v2.CustomizedBackoff{Next: next}}}
}
