//go:build !race

// The RocketMQ 5 gRPC client races on its own settings, so this part of the
// workload is left out of race-detector builds; scripts/test.sh runs the
// replay test without -race too.

package replay_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

func init() { grpcPopWorkload = popThroughGRPC }

// popThroughGRPC has a RocketMQ 5 SimpleConsumer (POP over gRPC) receive
// messages, acknowledge one, change another's invisible time and leave the
// rest in flight; another group's consumer lets every message's invisible
// time run out until the broker dead-letters them all.
func popThroughGRPC(ctx context.Context, t *testing.T, n *apptest.TestNode) {
	t.Helper()
	dir := t.TempDir()
	os.Setenv("rocketmq.client.logRoot", dir)
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	sc := startSimple(t, n, "grpc-pop")
	defer sc.GracefulStop()
	var got []*rmq.MessageView
	apptest.Eventually(t, 30*time.Second, "a gRPC simple consumer received 4 messages", func() bool {
		got = append(got, receive(ctx, t, sc, int32(4-len(got)), time.Hour)...)
		return len(got) >= 4
	})
	if err := sc.Ack(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := sc.ChangeInvisibleDuration(got[1], 3*time.Hour); err != nil {
		t.Fatal(err)
	}

	// One retry, then the dead-letter queue.
	b := n.App.Broker()
	cfg := broker.DefaultGroupConfig("grpc-dlq")
	cfg.RetryMaxTimes = 1
	if err := b.SetGroupConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	dlq := startSimple(t, n, "grpc-dlq")
	defer dlq.GracefulStop()
	dlqName := model.TopicName{Tenant: "public", Namespace: "default", Topic: "%DLQ%grpc-dlq"}
	apptest.Eventually(t, 60*time.Second, "every message of the topic dead-lettered", func() bool {
		receive(ctx, t, dlq, 32, 10*time.Second) // never acknowledged
		topic, err := b.Topic(dlqName)
		if err != nil {
			return false
		}
		_, hw, _, err := b.Engine().Offsets(topic.Queues[0])
		return err == nil && hw == 10
	})
}

// startSimple starts a SimpleConsumer of the topic "popped".
func startSimple(t *testing.T, n *apptest.TestNode, group string) rmq.SimpleConsumer {
	t.Helper()
	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: n.GRPCAddr(), Credentials: &credentials.SessionCredentials{}, ConsumerGroup: group},
		rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{"popped": rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	return sc
}

// receive receives up to max messages; none (MESSAGE_NOT_FOUND) is no error.
func receive(ctx context.Context, t *testing.T, sc rmq.SimpleConsumer, max int32, invisible time.Duration) []*rmq.MessageView {
	t.Helper()
	mvs, err := sc.Receive(ctx, max, invisible)
	var es *rmq.ErrRpcStatus
	if err != nil && !(errors.As(err, &es) && es.Code == 40401) {
		t.Fatal(err)
	}
	return mvs
}
