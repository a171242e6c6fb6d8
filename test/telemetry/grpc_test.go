//go:build !race

// The RocketMQ 5 client races on its own settings (see test/grpc), so its
// span check is left out of race-detector builds.

package telemetry_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestGRPCSendSpanJoinsClientTrace: a RocketMQ 5 send carrying a
// traceparent property gets a broker span in the client's trace, and the
// SimpleConsumer's receive of it a span linked to that trace; a
// rocketmq-client-go push consumer's pull likewise.
func TestGRPCSendSpanJoinsClientTrace(t *testing.T) {
	dir := t.TempDir()
	os.Setenv("rocketmq.client.logRoot", dir)
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	col := newCollector(t)
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Telemetry.OTLPEndpoint = col.url
	cfg.Telemetry.BatchTimeout = 100 * time.Millisecond
	n := apptest.StartTestNode(t, cfg)
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: n.GRPCAddr(), Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics("traced-grpc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.GracefulStop()
	const traceID, parent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
	m := &rmq.Message{Topic: "traced-grpc", Body: []byte("receipt")}
	m.AddProperty("traceparent", "00-"+traceID+"-"+parent+"-01")
	if _, err := p.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 15*time.Second, "the send span exported", func() bool { return col.find("send traced-grpc", traceID, parent) != nil })

	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: n.GRPCAddr(), ConsumerGroup: "traced-sc", Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(2*time.Second), rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{"traced-grpc": rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	defer sc.GracefulStop()
	apptest.Eventually(t, 20*time.Second, "the message received", func() bool {
		msgs, _ := sc.Receive(context.Background(), 16, 20*time.Second)
		for _, m := range msgs {
			_ = sc.Ack(context.Background(), m)
		}
		return len(msgs) > 0
	})
	apptest.Eventually(t, 15*time.Second, "the receive span linked to the sender's trace", func() bool {
		return col.linked("receive traced-grpc", traceID) != nil
	})

	// rocketmq-client-go: a send with a traceparent, pulled by a push consumer.
	const rmqTrace, rmqParent = "6bf92f3577b34da6a3ce929d0e0e4738", "20f067aa0ba902b9"
	rp, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("traced-pull-pg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.Start(); err != nil {
		t.Fatal(err)
	}
	defer rp.Shutdown()
	msg := primitive.NewMessage("traced-pull", []byte("parcel"))
	msg.WithProperty("traceparent", "00-"+rmqTrace+"-"+rmqParent+"-01")
	if _, err := rp.SendSync(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		consumer.WithGroupName("traced-pull-cg"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 16)
	if err := pc.Subscribe("traced-pull", consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		got <- struct{}{}
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the push consumer got nothing")
	}
	apptest.Eventually(t, 15*time.Second, "the pull span linked to the sender's trace", func() bool {
		return col.linked("pull traced-pull", rmqTrace) != nil
	})
}
