//go:build !race

package rocketmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestDashboardRelaysToConsumers: the requests RocketMQ Dashboard and
// mqadmin send a broker for one consumer are relayed to the live
// rocketmq-client-go consumer and its answers come back: its running info
// (GET_CONSUMER_RUNNING_INFO), consuming one stored message again now
// (CONSUME_MESSAGE_DIRECTLY, the Dashboard's resend), and the group's
// offsets as each client holds them (INVOKE_BROKER_TO_GET_CONSUMER_STATUS).
// Not under the race detector: rocketmq-client-go encodes its running info
// while its rebalance writes the same process queue (a race of its own).
func TestDashboardRelaysToConsumers(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "dash-pg")
	var ids []string
	for i := 0; i < 3; i++ {
		res, err := p.SendSync(context.Background(), primitive.NewMessage("dash-topic", []byte(fmt.Sprintf("m%d", i))))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.OffsetMsgID)
	}
	var mu sync.Mutex
	deliveries := map[string]int{}
	startConsumer(t, addr, "dash-cg", "dash-topic", consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			deliveries[string(m.Body)]++
		}
		return consumer.ConsumeSuccess, nil
	})
	eventually(t, 20*time.Second, "the three messages consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deliveries) == 3
	})
	var conns struct {
		Set []struct {
			ClientID string `json:"clientId"`
		} `json:"connectionSet"`
	}
	eventually(t, 10*time.Second, "the consumer's connection listed", func() bool {
		r := call(t, addr, &protocol.Command{Code: protocol.GetConsumerConnectionList, ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "dash-cg"})})
		return r.Code == protocol.Success && json.Unmarshal(r.Body, &conns) == nil && len(conns.Set) == 1
	})
	id := conns.Set[0].ClientID

	r := call(t, addr, &protocol.Command{Code: protocol.GetConsumerRunningInfo,
		ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "dash-cg", "clientId": id, "jstackEnable": "false"})})
	if r.Code != protocol.Success || !strings.Contains(string(r.Body), "dash-topic") {
		t.Fatalf("running info: %d %s %s", r.Code, r.Remark, r.Body)
	}

	r = call(t, addr, &protocol.Command{Code: protocol.ConsumeMessageDirectly,
		ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "dash-cg", "clientId": id, "msgId": ids[1]})})
	var direct struct {
		ConsumeResult int `json:"consumeResult"`
	}
	if r.Code != protocol.Success || json.Unmarshal(r.Body, &direct) != nil || direct.ConsumeResult != 0 {
		t.Fatalf("consume directly: %d %s %s", r.Code, r.Remark, r.Body)
	}
	mu.Lock()
	if deliveries["m1"] != 2 {
		t.Errorf("m1 delivered %d times after a direct consumption, want 2", deliveries["m1"])
	}
	mu.Unlock()

	r = call(t, addr, &protocol.Command{Code: protocol.InvokeBrokerToGetConsumerStatus,
		ExtFields: protocol.FieldsOf(map[string]string{"group": "dash-cg", "topic": "dash-topic"})})
	// RocketMQ's JSON with queue objects as map keys, as its broker gathers it.
	if body := string(r.Body); r.Code != protocol.Success || !strings.HasPrefix(body, `{"consumerTable":{"`+id+`":{`) ||
		!strings.Contains(body, `"topic":"dash-topic"`) || r.Ext("clients") != "1" {
		t.Fatalf("consumer status: %d %s %s", r.Code, r.Remark, r.Body)
	}

	// A client that is not there gets an error, not a hang.
	r = call(t, addr, &protocol.Command{Code: protocol.GetConsumerRunningInfo,
		ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "dash-cg", "clientId": "nobody@0"})})
	if r.Code != protocol.SystemError || !strings.Contains(r.Remark, "not online") {
		t.Errorf("running info of an absent client: %d %s", r.Code, r.Remark)
	}
}
