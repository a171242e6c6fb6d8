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
)

func init() { grpcPopWorkload = popThroughGRPC }

// popThroughGRPC has a RocketMQ 5 SimpleConsumer (POP over gRPC) receive
// messages, acknowledge one, change another's invisible time and leave the
// rest in flight.
func popThroughGRPC(ctx context.Context, t *testing.T, n *apptest.TestNode) {
	t.Helper()
	dir := t.TempDir()
	os.Setenv("rocketmq.client.logRoot", dir)
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: n.GRPCAddr(), Credentials: &credentials.SessionCredentials{}, ConsumerGroup: "grpc-pop"},
		rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{"popped": rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	defer sc.GracefulStop()
	var got []*rmq.MessageView
	apptest.Eventually(t, 30*time.Second, "a gRPC simple consumer received 4 messages", func() bool {
		mvs, err := sc.Receive(ctx, int32(4-len(got)), time.Hour)
		var es *rmq.ErrRpcStatus
		if err != nil && !(errors.As(err, &es) && es.Code == 40401) {
			t.Fatal(err)
		}
		got = append(got, mvs...)
		return len(got) >= 4
	})
	if err := sc.Ack(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := sc.ChangeInvisibleDuration(got[1], 3*time.Hour); err != nil {
		t.Fatal(err)
	}
}
