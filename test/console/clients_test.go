//go:build !race

package console_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func init() { rlog.SetLogLevel("error") }

// undecided is a transaction listener that never decides.
type undecided struct{}

func (undecided) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

func (undecided) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

// TestConsoleWithClients: the console shows what real clients did — a
// topic holding franz-go records, rocketmq-client-go and RocketMQ 5 client
// messages, a KIP-848 group, a RocketMQ push consumer group and a RocketMQ 5
// simple consumer group with their live members, and a
// RocketMQ message's traced life (produced over remoting, delivered to its
// group), a franz-go transaction and a RocketMQ half message in doubt, and
// a RocketMQ message waiting on a delay level.
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

	os.Setenv("rocketmq.client.logRoot", t.TempDir())
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	gp, err := rmq.NewProducer(&rmq.Config{Endpoint: n.GRPCAddr(), Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics("payments"))
	if err != nil {
		t.Fatal(err)
	}
	if err := gp.Start(); err != nil {
		t.Fatal(err)
	}
	defer gp.GracefulStop()
	gm := &rmq.Message{Topic: "payments", Body: []byte("grpc payment")}
	gm.SetKeys("grpc-key-1")
	if _, err := gp.Send(ctx, gm); err != nil {
		t.Fatal(err)
	}
	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: n.GRPCAddr(), ConsumerGroup: "refunds-sc", Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(time.Second), rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{"payments": rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	defer sc.GracefulStop()

	// Work in doubt and waiting: a franz-go transaction left open, a
	// RocketMQ transactional message its producer cannot decide, and a
	// RocketMQ message on a delay level.
	txc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("payments"), kgo.TransactionalID("settlement-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer txc.Close()
	if err := txc.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txc.ProduceSync(ctx, &kgo.Record{Value: []byte("settlement in doubt")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tp, err := rocketmq.NewTransactionProducer(undecided{}, producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("refund-txn-pg"), producer.WithInstanceName("console-txn"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(); err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown()
	half, err := tp.SendMessageInTransaction(ctx, primitive.NewMessage("payments", []byte("refund in doubt")).WithKeys([]string{"half-1"}))
	if err != nil {
		t.Fatal(err)
	}
	delayed := primitive.NewMessage("payments", []byte("reminder")).WithTag("dunning").WithKeys([]string{"dunning-1"})
	delayed.WithDelayTimeLevel(16) // 30 minutes
	if _, err := p.SendSync(ctx, delayed); err != nil {
		t.Fatal(err)
	}

	br := openBrowser(t, exe, "clients")
	br.do("groups", chromedp.Navigate(base+"/#/groups"))
	groups := br.waitFor("audit-cg")
	br.waitFor("ledger-848")
	br.waitFor("refunds-sc")
	br.shot("groups")
	br.do("the KIP-848 group", chromedp.Navigate(base+"/#/groups/ledger-848"))
	kafkaGroup := br.waitFor("ledger-app")
	br.shot("kafka-group")
	br.do("the RocketMQ group", chromedp.Navigate(base+"/#/groups/audit-cg"))
	rmqGroup := br.waitFor("rocketmq")
	br.shot("rocketmq-group")
	br.do("the RocketMQ 5 group", chromedp.Navigate(base+"/#/groups/refunds-sc"))
	grpcGroup := br.waitFor("rocketmq-grpc")
	br.shot("rocketmq5-group")
	br.do("the topic", chromedp.Navigate(base+"/#/topics/payments"))
	topic := br.waitFor("rocketmq payment")
	br.waitFor("kafka payment 2")
	br.waitFor("grpc payment")
	br.shot("topic")
	br.openModal("the RocketMQ message", `//span[contains(text(), 'rocketmq payment')]`)
	detail := br.waitIn("modal-body", "delivered")
	br.shot("traced-message")
	br.do("close it", chromedp.Click(chromedp.ID("modal-close")))
	br.do("transactions", chromedp.Navigate(base+"/#/transactions"))
	txns := br.waitFor("settlement-txn")
	br.waitFor("refund-txn-pg")
	br.shot("transactions")
	br.do("timers", chromedp.Navigate(base+"/#/timers"))
	timers := br.waitFor("dunning-1")
	br.shot("timers")
	for what, got := range map[string][]string{
		"transactions": {txns, "settlement-txn", "payments-0", "refund-txn-pg", half.MsgID},
		"timers":       {timers, "payments", "delay level 16", "dunning"},
		"groups":       {groups, "ledger-848", "audit-cg"},
		"kafka group":  {kafkaGroup, "KIP-848 consumer group", "ledger-app", "payments 0"},
		"rmq group":    {rmqGroup, "audit-cg", "payments *", "chosen by the clients"},
		"grpc group":   {grpcGroup, "refunds-sc", "SIMPLE_CONSUMER", "any queue (POP)"},
		"topic":        {topic, "kafka payment 0", "rocketmq payment", "grpc payment", "grpc-key-1"},
		"detail":       {detail, res.MsgID, "produced", "remoting", "checkout-pg", "delivered", "audit-cg"},
	} {
		for _, want := range got[1:] {
			if !strings.Contains(got[0], want) {
				t.Errorf("%s page lacks %q:\n%s", what, want, got[0])
			}
		}
	}
}
