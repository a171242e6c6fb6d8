package admin_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// undecided answers every local transaction and check-back with UNKNOWN.
type undecided struct{}

func (undecided) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

func (undecided) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

// TestTransactionsInDoubt: a Kafka transaction its producer left open
// (holding back read_committed readers) and a RocketMQ half message its
// producer never decides are listed by the admin API; aborting the first
// releases the partition's last stable offset, committing the second
// delivers the message.
func TestTransactionsInDoubt(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	base := "http://" + n.HTTPAddr()
	ctx := context.Background()
	api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "ledger", "queues": 1}, nil)

	// A Kafka transaction left open.
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.TransactionalID("hanging"), kgo.DefaultProduceTopic("ledger"),
		kgo.TransactionTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("uncommitted")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A RocketMQ half message nobody decides.
	p, err := rocketmq.NewTransactionProducer(undecided{}, producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("undecided-pg"), producer.WithInstanceName("undecided"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	if _, err := p.SendMessageInTransaction(ctx, primitive.NewMessage("ledger", []byte("half")).WithKeys([]string{"half-1"})); err != nil {
		t.Fatal(err)
	}

	var doubt apiv1.Transactions
	api(t, base, "GET", "/api/v1/transactions", nil, &doubt)
	if len(doubt.Kafka) != 1 || doubt.Kafka[0].ID != "hanging" || doubt.Kafka[0].State != "Ongoing" ||
		len(doubt.Kafka[0].Partitions) != 1 || doubt.Kafka[0].Partitions[0].Topic != "ledger" {
		t.Fatalf("kafka transactions in doubt: %+v", doubt.Kafka)
	}
	if len(doubt.RocketMQ) != 1 || doubt.RocketMQ[0].Group != "undecided-pg" || doubt.RocketMQ[0].Topic != "ledger" || doubt.RocketMQ[0].Keys != "half-1" {
		t.Fatalf("rocketmq half messages: %+v", doubt.RocketMQ)
	}

	adm := kadm.NewClient(cl)
	stable := func() (lso, hwm int64) {
		l, err1 := adm.ListCommittedOffsets(ctx, "ledger")
		h, err2 := adm.ListEndOffsets(ctx, "ledger")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		a, _ := l.Lookup("ledger", 0)
		b, _ := h.Lookup("ledger", 0)
		return a.Offset, b.Offset
	}
	if lso, hwm := stable(); lso >= hwm {
		t.Fatalf("an open transaction did not hold back the last stable offset: %d of %d", lso, hwm)
	}
	if code := api(t, base, "POST", "/api/v1/transactions/kafka/hanging/abort", nil, nil); code != http.StatusNoContent {
		t.Fatalf("abort: %d", code)
	}
	apptest.Eventually(t, 10*time.Second, "the last stable offset released", func() bool { lso, hwm := stable(); return lso == hwm })
	var e apiErr
	if code := api(t, base, "POST", "/api/v1/transactions/kafka/hanging/abort", nil, &e); code != 404 {
		t.Errorf("aborting it again: %d %+v", code, e)
	}

	var sent apiv1.MessageSent
	if code := api(t, base, "POST", "/api/v1/transactions/rocketmq/"+itoa(doubt.RocketMQ[0].Offset)+"/commit", nil, &sent); code != 200 || sent.Topic != "ledger" {
		t.Fatalf("commit the half message: %d %+v", code, sent)
	}
	var found []apiv1.MessageView
	api(t, base, "GET", "/api/v1/messages?key=half-1&topic=ledger", nil, &found)
	if len(found) != 1 || found[0].Body != "half" {
		t.Errorf("the committed half message: %+v", found)
	}
	api(t, base, "GET", "/api/v1/transactions", nil, &doubt)
	if len(doubt.Kafka) != 0 || len(doubt.RocketMQ) != 0 {
		t.Errorf("still in doubt: %+v", doubt)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
