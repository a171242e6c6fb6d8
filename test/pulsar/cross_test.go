//go:build !race

package pulsar_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestPulsarToRocketMQ: messages a Pulsar producer sends (batched, ZSTD)
// reach a rocketmq-client-go push consumer with the key as KEYS and the
// properties as user properties. (rocketmq-client-go races on its own
// state: this file is left out of -race runs.)
func TestPulsarToRocketMQ(t *testing.T) {
	rlog.SetLogLevel("error")
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic, total = "pulsar-to-rocketmq", 200
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, CompressionType: pulsar.ZSTD})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range total {
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Key: fmt.Sprint("order-", i), Payload: []byte(fmt.Sprint("m", i)),
			Properties: map[string]string{"region": "eu", "i": fmt.Sprint(i)}}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	wg.Wait()
	p.Close()

	var mu sync.Mutex
	got := map[string]*primitive.MessageExt{}
	pc, err := rocketmq.NewPushConsumer(consumer.WithGroupName("from-pulsar"), consumer.WithInstance("from-pulsar"),
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
				got[string(m.Body)] = m
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
	apptest.Eventually(t, 60*time.Second, "the RocketMQ consumer to get every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == total
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range total {
		m := got[fmt.Sprint("m", i)]
		if m.GetKeys() != fmt.Sprint("order-", i) || m.GetProperty("region") != "eu" || m.GetProperty("i") != fmt.Sprint(i) {
			t.Fatalf("m%d: keys %q properties %v", i, m.GetKeys(), m.GetProperties())
		}
	}
}
