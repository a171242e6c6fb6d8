//go:build !race

package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestMessageTrace: on a topic with message_trace on, a RocketMQ message's
// life is recorded — produced by its producer, delivered to the consumer
// group, sent back for a retry, delivered again — and read back by its
// message id; a timer message's wait and firing too; a Kafka record's
// production and its fetches by Kafka and RocketMQ consumers; a topic
// without the switch records nothing.
func TestMessageTrace(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	base := "http://" + n.HTTPAddr()
	ctx := context.Background()
	if code := api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "traced", "queues": 1, "config": map[string]any{"message_trace": true}}, nil); code != http.StatusCreated {
		t.Fatalf("create traced topic: %d", code)
	}
	api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "quiet", "queues": 1}, nil)
	var detail apiv1.TopicDetail
	if api(t, base, "GET", "/api/v1/topics/traced", nil, &detail); !detail.Config.MessageTrace {
		t.Fatalf("the topic's config does not say it is traced: %+v", detail.Config)
	}

	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("trace-pg"), producer.WithInstanceName("trace"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	send := func(topic string, m *primitive.Message) string {
		t.Helper()
		m.Topic = topic
		res, err := p.SendSync(ctx, m)
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send: %v %v", res, err)
		}
		return res.MsgID
	}
	id := send("traced", primitive.NewMessage("", []byte("order 1")).WithTag("new"))
	quiet := send("quiet", primitive.NewMessage("", []byte("not traced")))
	timer := primitive.NewMessage("", []byte("later"))
	timer.WithProperty("TIMER_DELAY_MS", "1500")
	timerID := send("traced", timer)

	// A consumer that asks for a retry the first time it sees "order 1".
	var failed atomic.Bool
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		consumer.WithGroupName("trace-cg"), consumer.WithInstance("trace"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe("traced", consumer.MessageSelector{}, func(cctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			if string(m.Body) == "order 1" && failed.CompareAndSwap(false, true) {
				if cc, ok := primitive.GetConcurrentlyCtx(cctx); ok {
					cc.DelayLevelWhenNextConsume = 1 // again in a second
				}
				return consumer.ConsumeRetryLater, nil
			}
		}
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()

	kinds := func(id string) ([]string, []apiv1.TraceEvent) {
		var tr apiv1.MessageTrace
		if code := api(t, base, "GET", "/api/v1/trace?id="+url.QueryEscape(id), nil, &tr); code != http.StatusOK {
			t.Fatalf("trace: %d", code)
		}
		var ks []string
		for _, e := range tr.Events {
			ks = append(ks, e.Kind)
		}
		return ks, tr.Events
	}
	apptest.Eventually(t, 60*time.Second, "the retried message's second delivery to be traced", func() bool {
		ks, _ := kinds(id)
		return len(ks) >= 4 && slices.Equal(ks[:4], []string{"produced", "delivered", "retried", "delivered"})
	})
	_, evs := kinds(id)
	if e := evs[0]; e.Topic != "traced" || e.Offset != 0 || e.Protocol != "remoting" || e.Group != "trace-pg" || e.ID != id {
		t.Errorf("produced: %+v", e)
	}
	if e := evs[1]; e.Group != "trace-cg" || e.Attempt != 1 || e.Topic != "traced" || e.Client == "" {
		t.Errorf("first delivery: %+v", e)
	}
	if e := evs[2]; e.Group != "trace-cg" || e.Attempt != 1 || e.Topic != "%RETRY%trace-cg" {
		t.Errorf("retry: %+v", e)
	}
	if e := evs[3]; e.Attempt != 2 || e.Topic != "%RETRY%trace-cg" {
		t.Errorf("second delivery: %+v", e)
	}
	apptest.Eventually(t, 30*time.Second, "the timer message's firing and delivery to be traced", func() bool {
		ks, _ := kinds(timerID)
		return len(ks) >= 3 && slices.Equal(ks[:3], []string{"produced", "timer fired", "delivered"})
	})
	if ks, evs := kinds(timerID); len(ks) < 3 {
		t.Fatalf("timer events: %v %+v", ks, evs)
	} else if evs[0].Offset != -1 || evs[0].Detail == "" || evs[1].Offset < 0 {
		t.Errorf("timer events: %+v", evs)
	}
	// Found by place too.
	var byPlace apiv1.MessageTrace
	api(t, base, "GET", "/api/v1/trace?topic=traced&queue=0&offset=0", nil, &byPlace)
	if len(byPlace.Events) < 2 || byPlace.Events[0].ID != id {
		t.Errorf("by place: %+v", byPlace.Events)
	}
	// A Kafka record (found by its place), consumed by the RocketMQ group.
	kcl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ClientID("kafka-tracer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	rec := &kgo.Record{Topic: "traced", Partition: 0, Value: []byte("from kafka")}
	if err := kcl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 30*time.Second, "the Kafka record produced, then delivered to the RocketMQ consumer", func() bool {
		var tr apiv1.MessageTrace
		api(t, base, "GET", fmt.Sprintf("/api/v1/trace?topic=traced&queue=0&offset=%d", rec.Offset), nil, &tr)
		return len(tr.Events) == 2 && tr.Events[0].Kind == "produced" && tr.Events[0].Protocol == "kafka" && tr.Events[0].Client == "kafka-tracer" &&
			tr.Events[1].Kind == "delivered" && tr.Events[1].Group == "trace-cg"
	})
	// A Kafka consumer's fetch of that record, and of the RocketMQ message
	// (found by its id), are deliveries to that client.
	fcl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ClientID("kafka-reader"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"traced": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer fcl.Close()
	fetched := 0
	for fetched <= int(rec.Offset) {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := fcl.PollFetches(fctx)
		timedOut := fctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("fetched %d records", fetched)
		}
		fetched += len(fs.Records())
	}
	fetchedBy := func(tr apiv1.MessageTrace) bool {
		for _, e := range tr.Events {
			if e.Kind == "delivered" && e.Protocol == "kafka" && e.Client == "kafka-reader" {
				return true
			}
		}
		return false
	}
	apptest.Eventually(t, 10*time.Second, "the Kafka fetches recorded as deliveries", func() bool {
		var byOffset, byID apiv1.MessageTrace
		api(t, base, "GET", fmt.Sprintf("/api/v1/trace?topic=traced&queue=0&offset=%d", rec.Offset), nil, &byOffset)
		api(t, base, "GET", "/api/v1/trace?id="+url.QueryEscape(id), nil, &byID)
		return fetchedBy(byOffset) && fetchedBy(byID)
	})
	// A Kafka share group's acquisition and acceptance of the record.
	cfg := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "trace-share"
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, c)
	cfg.Resources = append(cfg.Resources, res)
	if resp, err := cfg.RequestWith(ctx, kcl); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("share group config: %v %+v", err, resp)
	}
	scl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ClientID("kafka-share"), kgo.ShareGroup("trace-share"),
		kgo.ConsumeTopics("traced"))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	shared := false
	for !shared {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := scl.PollFetches(sctx)
		timedOut := sctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatal("the share group got nothing")
		}
		fs.EachRecord(func(r *kgo.Record) {
			r.Ack(kgo.AckAccept)
			shared = shared || r.Offset == rec.Offset
		})
	}
	if err := scl.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 10*time.Second, "the share group's delivery and acceptance traced", func() bool {
		var tr apiv1.MessageTrace
		api(t, base, "GET", fmt.Sprintf("/api/v1/trace?topic=traced&queue=0&offset=%d", rec.Offset), nil, &tr)
		delivered, accepted := false, false
		for _, e := range tr.Events {
			delivered = delivered || e.Kind == "delivered" && e.Group == "trace-share" && e.Client == "kafka-share" && e.Attempt == 1
			accepted = accepted || e.Kind == "acknowledged" && e.Group == "trace-share" && e.Detail == "share accept"
		}
		return delivered && accepted
	})
	if ks, _ := kinds(quiet); len(ks) != 0 {
		t.Errorf("an untraced topic's message has events: %v", ks)
	}
	// The switch turns off with a PATCH.
	var altered apiv1.TopicDetail
	if code := api(t, base, "PATCH", "/api/v1/topics/traced", map[string]any{"message_trace": false, "queues": 2}, &altered); code != http.StatusOK ||
		altered.Config.MessageTrace || altered.Queues != 2 {
		t.Fatalf("patch: %d %+v", code, altered)
	}
	if code := api(t, base, "PATCH", "/api/v1/topics/traced", map[string]any{"queues": 1}, nil); code != http.StatusBadRequest {
		t.Errorf("shrinking a topic: %d", code)
	}
	if code := api(t, base, "GET", "/api/v1/trace", nil, nil); code != http.StatusBadRequest {
		t.Errorf("a trace query without id: %d", code)
	}
}
