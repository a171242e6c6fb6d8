//go:build !race

package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestConsoleRedriveAndReset: two operator flows through the console, each
// checked by a real client. A RocketMQ push consumer gives up on a message
// and on a Kafka record (both land in the group's dead-letter topic; the
// Kafka record's broker-side trace follows it there); re-driven from the
// dead letters page, the same group consumes the message. A Kafka group that consumed
// its topic is reset by time on the group page; its consumer reads the
// records again.
func TestConsoleRedriveAndReset(t *testing.T) {
	exe := chromium(t)
	c := apptest.TestConfig(t.TempDir())
	c.Broker.DelayLevels = "1s 1s 1s 1s 1s" // retries come back within a second
	n := apptest.StartTestNode(t, c)
	base := "http://" + n.HTTPAddr()
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	post(t, base+"/api/v1/topics", map[string]any{"name": "refunds", "queues": 1, "config": map[string]any{"message_trace": true}})

	// A refund the consumer cannot handle yet: two attempts, then the DLQ.
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("refunds-pg"), producer.WithInstanceName("flows"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	if _, err := p.SendSync(ctx, primitive.NewMessage("refunds", []byte("refund 42")).WithKeys([]string{"refund-42"})); err != nil {
		t.Fatal(err)
	}
	// And a Kafka record on the same topic, which the consumer fails too.
	kcl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("ledger"), kgo.AllowAutoTopicCreation(), kgo.ClientID("refund-app"))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	krec := &kgo.Record{Topic: "refunds", Value: []byte("kafka refund 7")}
	if err := kcl.ProduceSync(ctx, krec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	handled := make(chan string, 16)
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		consumer.WithGroupName("refunds-cg"), consumer.WithInstance("flows"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithMaxReconsumeTimes(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe("refunds", consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			if !fixed.Load() || string(m.Body) != "refund 42" {
				return consumer.ConsumeRetryLater, nil
			}
		}
		for _, m := range msgs {
			handled <- string(m.Body)
		}
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()
	apptest.Eventually(t, 60*time.Second, "both refunds in refunds-cg's dead letters", func() bool {
		var dl []apiv1.DeadLetterSummary
		getJSON(t, base+"/api/v1/deadletters", &dl)
		for _, d := range dl {
			if d.Group == "refunds-cg" && d.Messages == 2 {
				return true
			}
		}
		return false
	})
	fixed.Store(true)
	// The Kafka record's life, traced by the broker: produced over Kafka,
	// delivered to the RocketMQ group, retried, delivered again,
	// dead-lettered.
	var life []string
	apptest.Eventually(t, 10*time.Second, "the Kafka record's trace", func() bool {
		var tr apiv1.MessageTrace
		getJSON(t, fmt.Sprintf("%s/api/v1/trace?topic=refunds&queue=0&offset=%d", base, krec.Offset), &tr)
		life = life[:0]
		for _, e := range tr.Events {
			life = append(life, e.Kind+"/"+e.Protocol)
		}
		return len(tr.Events) > 0 && tr.Events[len(tr.Events)-1].Kind == "dead-lettered"
	})
	if want := []string{"produced/kafka", "delivered/remoting", "retried/remoting", "delivered/remoting", "dead-lettered/remoting"}; !slices.Equal(life, want) {
		t.Errorf("the Kafka record's trace: %v, want %v", life, want)
	}

	// A Kafka group that has read and committed its three records.
	for i := range 3 {
		if err := kcl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("entry %d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func() int {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("ledger"), kgo.ConsumerGroup("ledger-g"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		got := 0
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for got < 3 {
			fs := cl.PollFetches(pctx)
			if pctx.Err() != nil {
				break
			}
			got += len(fs.Records())
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := readAll(); got != 3 {
		t.Fatalf("the group read %d records, want 3", got)
	}

	br := openBrowser(t, exe, "flows")
	br.do("the dead letters", chromedp.Navigate(base+"/#/dlq/refunds-cg"))
	br.waitFor("refund 42")
	br.shot("dead-letter")
	br.click("select it", `//tr[contains(., 'refund 42')]//input[@type='checkbox']`)
	br.click("re-drive it", `//button[text()='Re-drive selected']`)
	redriven := br.waitFor("Re-drove 1")
	br.shot("re-driven")
	select {
	case body := <-handled:
		if body != "refund 42" {
			t.Fatalf("refunds-cg consumed %q", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("refunds-cg never consumed the re-driven message (page: %s)", redriven)
	}

	br.do("the topic", chromedp.Navigate(base+"/#/topics/refunds"))
	br.openModal("the Kafka record", `//span[contains(text(), 'kafka refund 7')]`)
	timeline := br.waitIn("modal-body", "dead-lettered")
	br.shot("kafka-record-dead-lettered")
	for _, want := range []string{"produced", "refund-app", "retried", "refunds-cg"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("the Kafka record's timeline lacks %q:\n%s", want, timeline)
		}
	}
	br.do("close it", chromedp.Click(chromedp.ID("modal-close")))

	br.do("the Kafka group", chromedp.Navigate(base+"/#/groups/ledger-g"))
	br.waitFor("total lag 0")
	br.do("reset by time", chromedp.SetValue(chromedp.CSS(`select[aria-label="reset to"]`), "time"),
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="time or offset"]`), before.UTC().Format(time.RFC3339)),
		chromedp.Click(chromedp.Search(`//button[text()='Reset']`)))
	br.waitFor("Offsets moved")
	br.shot("reset-by-time")
	if got := readAll(); got != 3 {
		t.Fatalf("after the reset by time, the group read %d records, want 3", got)
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
