//go:build !race

package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func init() { rlog.SetLogLevel("error") }

// TestConsoleWithClients: the console shows what real clients did — a
// topic holding franz-go records and rocketmq-client-go messages, a KIP-848
// group and a RocketMQ push consumer group with their live members, and a
// RocketMQ message's traced life (produced over remoting, delivered to its
// group).
func TestConsoleWithClients(t *testing.T) {
	exe := chromium(t)
	c := apptest.TestConfig(t.TempDir())
	c.Broker.GroupConsumerHeartbeatInterval = 250 * time.Millisecond
	n := apptest.StartTestNode(t, c)
	base := "http://" + n.HTTPAddr()
	ctx := context.Background()
	post(t, base+"/api/v1/topics", map[string]any{"name": "payments", "queues": 1, "config": map[string]any{"message_trace": true}})

	kcl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	for i := range 3 {
		if err := kcl.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("kafka-key-%d", i)), Value: []byte(fmt.Sprintf("kafka payment %d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	group, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("payments"), kgo.ConsumerGroup("ledger-848"),
		kgo.ServerSideBalancer(), kgo.ClientID("ledger-app"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer group.Close()
	go func() {
		for !group.PollFetches(context.Background()).IsClientClosed() {
		}
	}()

	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("checkout-pg"), producer.WithInstanceName("console"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	res, err := p.SendSync(ctx, primitive.NewMessage("payments", []byte("rocketmq payment")).WithKeys([]string{"rmq-key-1"}).WithTag("card"))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		consumer.WithGroupName("audit-cg"), consumer.WithInstance("console"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe("payments", consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()

	br := openBrowser(t, exe, "clients")
	br.do("groups", chromedp.Navigate(base+"/#/groups"))
	groups := br.waitFor("audit-cg")
	br.waitFor("ledger-848")
	br.shot("groups")
	br.do("the KIP-848 group", chromedp.Navigate(base+"/#/groups/ledger-848"))
	kafkaGroup := br.waitFor("ledger-app")
	br.shot("kafka-group")
	br.do("the RocketMQ group", chromedp.Navigate(base+"/#/groups/audit-cg"))
	rmqGroup := br.waitFor("rocketmq")
	br.shot("rocketmq-group")
	br.do("the topic", chromedp.Navigate(base+"/#/topics/payments"))
	topic := br.waitFor("rocketmq payment")
	br.waitFor("kafka payment 2")
	br.shot("topic")
	br.do("the RocketMQ message", chromedp.Click(chromedp.Search(`//span[contains(text(), 'rocketmq payment')]`)),
		chromedp.WaitVisible(chromedp.CSS("#modal-body pre")))
	detail := br.waitIn("modal-body", "delivered")
	br.shot("traced-message")
	for what, got := range map[string][]string{
		"groups":      {groups, "ledger-848", "audit-cg"},
		"kafka group": {kafkaGroup, "KIP-848 consumer group", "ledger-app", "payments 0"},
		"rmq group":   {rmqGroup, "audit-cg", "payments *", "chosen by the clients"},
		"topic":       {topic, "kafka payment 0", "rocketmq payment"},
		"detail":      {detail, res.MsgID, "produced", "remoting", "checkout-pg", "delivered", "audit-cg"},
	} {
		for _, want := range got[1:] {
			if !strings.Contains(got[0], want) {
				t.Errorf("%s page lacks %q:\n%s", what, want, got[0])
			}
		}
	}
}
