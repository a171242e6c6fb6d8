package rocketmq_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestRemotingPop: POP_MESSAGE hands out messages with POP_CK receipt
// handles in RocketMQ's extraInfo layout; ACK_MESSAGE acknowledges one;
// CHANGE_MESSAGE_INVISIBLETIME postpones another and answers a new handle;
// an unacknowledged one comes back after its invisible time with a higher
// reconsume count; a stale handle is refused; nothing left answers
// POLLING_TIMEOUT.
func TestRemotingPop(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "popped", 2)
	p := startProducer(t, addr, "pop-pg")
	for i := range 3 {
		if _, err := p.SendSync(context.Background(), primitive.NewMessage("popped", []byte(fmt.Sprint("p", i)))); err != nil {
			t.Fatal(err)
		}
	}
	popReq := func(invisible int) *protocol.Command {
		return call(t, addr, &protocol.Command{Code: protocol.PopMessage, ExtFields: protocol.FieldsOf(map[string]string{
			"consumerGroup": "pop-cg", "topic": "popped", "queueId": "-1", "maxMsgNums": "32",
			"invisibleTime": strconv.Itoa(invisible), "pollTime": "1000", "expType": "TAG", "exp": "*"})})
	}
	r := popReq(2000)
	if r.Code != protocol.Success {
		t.Fatalf("pop: %d %s", r.Code, r.Remark)
	}
	msgs := primitive.DecodeMessage(r.Body)
	if len(msgs) != 3 {
		t.Fatalf("popped %d messages", len(msgs))
	}
	ck := map[string]*primitive.MessageExt{}
	for _, m := range msgs {
		if m.GetProperty("POP_CK") == "" {
			t.Fatalf("no POP_CK: %v", m.GetProperties())
		}
		ck[string(m.Body)] = m
	}
	ackReq := func(m *primitive.MessageExt, extra string) *protocol.Command {
		return call(t, addr, &protocol.Command{Code: protocol.AckMessage, ExtFields: protocol.FieldsOf(map[string]string{
			"consumerGroup": "pop-cg", "topic": "popped", "queueId": strconv.Itoa(int(m.Queue.QueueId)),
			"extraInfo": extra, "offset": strconv.FormatInt(m.QueueOffset, 10)})})
	}
	if r := ackReq(ck["p0"], ck["p0"].GetProperty("POP_CK")); r.Code != protocol.Success {
		t.Fatalf("ack: %d %s", r.Code, r.Remark)
	}
	if r := ackReq(ck["p0"], ck["p0"].GetProperty("POP_CK")); r.Code == protocol.Success {
		t.Fatal("second ack accepted")
	}
	ch := call(t, addr, &protocol.Command{Code: protocol.ChangeMessageInvisibleTime, ExtFields: protocol.FieldsOf(map[string]string{
		"consumerGroup": "pop-cg", "topic": "popped", "queueId": strconv.Itoa(int(ck["p1"].Queue.QueueId)),
		"extraInfo": ck["p1"].GetProperty("POP_CK"), "offset": strconv.FormatInt(ck["p1"].QueueOffset, 10), "invisibleTime": "60000"})})
	if ch.Code != protocol.Success || ch.Ext("extraInfo") == "" {
		t.Fatalf("change: %d %s", ch.Code, ch.Remark)
	}
	time.Sleep(2200 * time.Millisecond)
	r = popReq(60000)
	again := primitive.DecodeMessage(r.Body)
	if r.Code != protocol.Success || len(again) != 1 || string(again[0].Body) != "p2" || again[0].ReconsumeTimes != 1 {
		t.Fatalf("after the invisible time: %d %v", r.Code, again)
	}
	if r := ackReq(ck["p1"], ck["p1"].GetProperty("POP_CK")); r.Code == protocol.Success {
		t.Fatal("ack with the handle from before the change accepted")
	}
	if r := ackReq(ck["p1"], ch.Ext("extraInfo")); r.Code != protocol.Success {
		t.Fatalf("ack with the changed handle: %d %s", r.Code, r.Remark)
	}
	if r := ackReq(again[0], again[0].GetProperty("POP_CK")); r.Code != protocol.Success {
		t.Fatalf("ack of the redelivered message: %d %s", r.Code, r.Remark)
	}
	if r := popReq(60000); r.Code != protocol.PollingTimeout {
		t.Fatalf("nothing left: %d", r.Code)
	}
}

// TestRemotingPopBatchAck: BATCH_ACK_MESSAGE acknowledges popped messages
// as bits above each queue's ckOffset, built from POP_CK the way upstream
// clients build it; acknowledged messages never come back, the one left
// out does, and a body that does not parse is refused.
func TestRemotingPopBatchAck(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "batch-acked", 2)
	p := startProducer(t, addr, "batch-pg")
	for i := range 40 {
		if _, err := p.SendSync(context.Background(), primitive.NewMessage("batch-acked", []byte(fmt.Sprint("m", i)))); err != nil {
			t.Fatal(err)
		}
	}
	popReq := func(invisible int) []*primitive.MessageExt {
		r := call(t, addr, &protocol.Command{Code: protocol.PopMessage, ExtFields: protocol.FieldsOf(map[string]string{
			"consumerGroup": "batch-cg", "topic": "batch-acked", "queueId": "-1", "maxMsgNums": "64",
			"invisibleTime": strconv.Itoa(invisible), "pollTime": "500"})})
		if r.Code != protocol.Success {
			return nil
		}
		return primitive.DecodeMessage(r.Body)
	}
	msgs := popReq(1500)
	if len(msgs) != 40 {
		t.Fatalf("popped %d", len(msgs))
	}
	type ackKey struct{ queue, ck, popTime, invisible string }
	groups := map[ackKey][]byte{}
	var kept *primitive.MessageExt
	for _, m := range msgs {
		if string(m.Body) == "m7" {
			kept = m
			continue
		}
		parts := strings.Split(m.GetProperty("POP_CK"), " ")
		k := ackKey{parts[6], parts[0], parts[1], parts[2]}
		ck, _ := strconv.ParseInt(parts[0], 10, 64)
		bit := int(m.QueueOffset - ck)
		set := groups[k]
		for len(set) <= bit/8 {
			set = append(set, 0)
		}
		set[bit/8] |= 1 << (bit % 8)
		groups[k] = set
	}
	var acks []string
	for k, set := range groups {
		acks = append(acks, fmt.Sprintf(`{"c":"batch-cg","t":"batch-acked","r":"0","so":%s,"q":%s,"rq":0,"pt":%s,"it":%s,"b":%q}`,
			k.ck, k.queue, k.popTime, k.invisible, base64.StdEncoding.EncodeToString(set)))
	}
	body := `{"brokerName":"x","acks":[` + strings.Join(acks, ",") + `]}`
	if r := call(t, addr, &protocol.Command{Code: protocol.BatchAckMessage, Body: []byte(body)}); r.Code != protocol.Success {
		t.Fatalf("batch ack: %d %s", r.Code, r.Remark)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.BatchAckMessage, Body: []byte(`{"acks":[{"b":7}]}`)}); r.Code != protocol.InvalidParameter {
		t.Fatalf("malformed batch ack: %d %s", r.Code, r.Remark)
	}
	time.Sleep(1700 * time.Millisecond)
	again := popReq(60000)
	if len(again) != 1 || string(again[0].Body) != "m7" || again[0].QueueOffset != kept.QueueOffset {
		t.Fatalf("after the invisible time: %d messages %v", len(again), again)
	}
}

// TestRemotingQueryAssignment: a group set to POP mode (what `mqadmin
// setConsumeMode` sends) is told to pop every queue (queue id -1); other
// groups read their share of the queues by PULL; retry topics cannot be
// set.
func TestRemotingQueryAssignment(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "assigned", 4)
	set := call(t, addr, &protocol.Command{Code: protocol.SetMessageRequestMode,
		Body: []byte(`{"topic":"assigned","consumerGroup":"pop-mode","mode":"POP","popShareQueueNum":0}`)})
	if set.Code != protocol.Success {
		t.Fatalf("set mode: %d %s", set.Code, set.Remark)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.SetMessageRequestMode,
		Body: []byte(`{"topic":"%RETRY%pop-mode","consumerGroup":"pop-mode","mode":"POP"}`)}); r.Code != protocol.NoPermission {
		t.Fatalf("retry topic mode: %d", r.Code)
	}
	query := func(group string) string {
		r := call(t, addr, &protocol.Command{Code: protocol.QueryAssignment,
			Body: []byte(`{"topic":"assigned","consumerGroup":"` + group + `","clientId":"10.0.0.1@1","strategyName":"AVG","messageModel":"CLUSTERING"}`)})
		if r.Code != protocol.Success {
			t.Fatalf("query assignment: %d %s", r.Code, r.Remark)
		}
		var body struct {
			MessageQueueAssignments []struct {
				MessageQueue struct {
					Topic   string
					QueueID int32 `json:"queueId"`
				}
				Mode string
			}
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range body.MessageQueueAssignments {
			out = append(out, fmt.Sprint(a.MessageQueue.Topic, ":", a.MessageQueue.QueueID, ":", a.Mode))
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	if got := query("pop-mode"); got != "assigned:-1:POP" {
		t.Fatalf("POP group: %s", got)
	}
	if got := query("pull-mode"); got != "assigned:0:PULL assigned:1:PULL assigned:2:PULL assigned:3:PULL" {
		t.Fatalf("PULL group: %s", got)
	}
}

// TestRemotingPopDeadLetters: a message popped more than its group's
// attempts (retryMaxTimes 1: two deliveries) moves to %DLQ%<group> with
// its origin recorded, exactly as over gRPC, and is not handed out again.
func TestRemotingPopDeadLetters(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "pop-dlq", 1)
	body := []byte(`{"groupName":"pop-dlq-cg","retryMaxTimes":1}`)
	if r := call(t, addr, &protocol.Command{Code: protocol.UpdateAndCreateSubscriptionGroup, Body: body}); r.Code != protocol.Success {
		t.Fatalf("group config: %d %s", r.Code, r.Remark)
	}
	p := startProducer(t, addr, "pop-dlq-pg")
	if _, err := p.SendSync(context.Background(), primitive.NewMessage("pop-dlq", []byte("doomed"))); err != nil {
		t.Fatal(err)
	}
	pop := func(group, topic string) *protocol.Command {
		return call(t, addr, &protocol.Command{Code: protocol.PopMessage, ExtFields: protocol.FieldsOf(map[string]string{
			"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "32",
			"invisibleTime": "1000", "pollTime": "3000", "expType": "TAG", "exp": "*"})})
	}
	for attempt := 1; attempt <= 2; attempt++ {
		r := pop("pop-dlq-cg", "pop-dlq")
		if r.Code != protocol.Success || len(primitive.DecodeMessage(r.Body)) != 1 {
			t.Fatalf("delivery %d: %d %s", attempt, r.Code, r.Remark)
		}
		time.Sleep(1100 * time.Millisecond) // not acknowledged: visible again
	}
	if r := pop("pop-dlq-cg", "pop-dlq"); r.Code != protocol.PollingTimeout {
		t.Fatalf("third delivery handed out: %d %s", r.Code, r.Remark)
	}
	r := pop("dlq-reader", "%DLQ%pop-dlq-cg")
	if r.Code != protocol.Success {
		t.Fatalf("dead-letter topic: %d %s", r.Code, r.Remark)
	}
	dead := primitive.DecodeMessage(r.Body)
	if len(dead) != 1 || string(dead[0].Body) != "doomed" || dead[0].GetProperty("DLQ_ORIGIN_TOPIC") != "pop-dlq" ||
		dead[0].GetProperty("DLQ_ORIGIN_MESSAGE_ID") == "" {
		t.Fatalf("dead letters: %+v", dead)
	}
}
