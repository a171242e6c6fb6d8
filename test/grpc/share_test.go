//go:build !race

package grpc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestShareAndSimpleConsumerGroupsEachSeeEverything: records from Kafka
// and RocketMQ 5 producers on one topic reach a Kafka share group (two
// franz-go share consumers) and a RocketMQ 5 SimpleConsumer group, each
// record once in each.
func TestShareAndSimpleConsumerGroupsEachSeeEverything(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const topic, group, each = "cross-share", "cross-share-g", 300
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if _, err := kadm.NewClient(kc).CreateTopic(ctx, 4, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	r.Configs = append(r.Configs, cfg)
	req.Resources = append(req.Resources, r)
	if resp, err := req.RequestWith(ctx, kc); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("group config: %v %+v", err, resp)
	}
	for i := range each {
		kc.Produce(ctx, kgo.StringRecord(fmt.Sprint("kafka-", i)), nil)
	}
	if err := kc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	gp := startProducer(t, n.GRPCAddr(), rmq.WithTopics(topic))
	for i := range each {
		if _, err := gp.Send(ctx, &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint("grpc-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	const total = 2 * each

	var mu sync.Mutex
	shared := map[string]int{}
	for range 2 {
		sc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		go func() {
			for ctx.Err() == nil {
				fs := sc.PollFetches(ctx)
				fs.EachRecord(func(rec *kgo.Record) {
					mu.Lock()
					shared[string(rec.Value)]++
					mu.Unlock()
					rec.Ack(kgo.AckAccept)
				})
			}
		}()
	}
	popped := map[string]int{}
	simple := startSimpleConsumer(t, n.GRPCAddr(), "cross-simple-g", topic)
	eventually(t, 90*time.Second, "both groups to get everything", func() bool {
		for _, mv := range receive(t, simple, 32, 20*time.Second) {
			popped[string(mv.GetBody())]++
			if err := simple.Ack(ctx, mv); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return len(popped) == total && len(shared) == total
	})
	time.Sleep(500 * time.Millisecond) // anything delivered twice would come now
	mu.Lock()
	defer mu.Unlock()
	for name, got := range map[string]map[string]int{"share": shared, "simple": popped} {
		for body, c := range got {
			if c != 1 {
				t.Errorf("%s group: %s seen %d times", name, body, c)
			}
		}
	}
}
