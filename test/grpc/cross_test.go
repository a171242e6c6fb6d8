//go:build !race

package grpc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestPopAndClassicGroupsEachSeeEverything: messages from Kafka, remoting
// and gRPC producers on one topic reach a POP group (gRPC SimpleConsumer)
// and a classic group (remoting push consumer), each message once in each.
func TestPopAndClassicGroupsEachSeeEverything(t *testing.T) {
	t.Parallel()
	rlog.SetLogLevel("error")
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, each = "cross-pop", 300
	ctx := context.Background()
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if _, err := kadm.NewClient(kc).CreateTopic(ctx, 4, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for i := range each {
		kc.Produce(ctx, kgo.StringRecord(fmt.Sprint("kafka-", i)), nil)
	}
	if err := kc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rp, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("cross-pg"), producer.WithInstanceName("cross-pop-producer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.Start(); err != nil {
		t.Fatal(err)
	}
	defer rp.Shutdown()
	for i := range each {
		if _, err := rp.SendSync(ctx, primitive.NewMessage(topic, []byte(fmt.Sprint("remoting-", i)))); err != nil {
			t.Fatal(err)
		}
	}
	gp := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	for i := range each {
		if _, err := gp.Send(ctx, &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint("grpc-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	const total = 3 * each

	var mu sync.Mutex
	classic := map[string]int{}
	pc, err := rocketmq.NewPushConsumer(consumer.WithGroupName("classic-g"), consumer.WithInstance("cross-pop-consumer"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				classic[string(m.Body)]++
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()

	popped := map[string]int{}
	sc := startSimpleConsumer(t, n.GRPCAddr(), "pop-g", topic)
	eventually(t, 90*time.Second, "both groups to get everything", func() bool {
		for _, mv := range receive(t, sc, 32, 20*time.Second) {
			popped[string(mv.GetBody())]++
			if err := sc.Ack(ctx, mv); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return len(popped) == total && len(classic) == total
	})
	for _, mv := range receive(t, sc, 32, 20*time.Second) {
		popped[string(mv.GetBody())]++
	}
	mu.Lock()
	defer mu.Unlock()
	for name, got := range map[string]map[string]int{"pop": popped, "classic": classic} {
		for body, c := range got {
			if c != 1 {
				t.Errorf("%s group: %s seen %d times", name, body, c)
			}
		}
	}
}
