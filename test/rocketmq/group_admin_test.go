package rocketmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestSubscriptionGroupAdmin: a subscription group created over the admin
// code is listed by the Go admin client with its settings, a group that may
// not consume gets NO_PERMISSION on pull, and deleting it drops it.
func TestSubscriptionGroupAdmin(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	body := []byte(`{"groupName":"sg-admin","consumeEnable":false,"retryMaxTimes":3}`)
	if r := call(t, addr, &protocol.Command{Code: protocol.UpdateAndCreateSubscriptionGroup, Body: body}); r.Code != protocol.Success {
		t.Fatalf("create group: %d %s", r.Code, r.Remark)
	}
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{addr})))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	groups, err := adm.GetAllSubscriptionGroup(context.Background(), addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := groups.SubscriptionGroupTable["sg-admin"]
	if !ok || g.RetryMaxTimes != 3 || g.ConsumeEnable || !g.ConsumeBroadcastEnable || g.RetryQueueNums != 1 {
		t.Fatalf("listed group: %v %+v", ok, g)
	}
	p := startProducer(t, addr, "sg-pg")
	if _, err := p.SendSync(context.Background(), primitive.NewMessage("sg-topic", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	pull := &protocol.Command{Code: protocol.PullMessage, ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "sg-admin",
		"topic": "sg-topic", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4",
		"subscription": "*", "expressionType": "TAG"})}
	if r := call(t, addr, pull); r.Code != protocol.NoPermission {
		t.Fatalf("pull by a group that may not consume: %d %s", r.Code, r.Remark)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.DeleteSubscriptionGroup,
		ExtFields: protocol.FieldsOf(map[string]string{"groupName": "sg-admin"})}); r.Code != protocol.Success {
		t.Fatalf("delete group: %d", r.Code)
	}
	if groups, err = adm.GetAllSubscriptionGroup(context.Background(), addr, 3*time.Second); err != nil {
		t.Fatal(err)
	} else if _, ok := groups.SubscriptionGroupTable["sg-admin"]; ok {
		t.Fatal("deleted group still listed")
	}
	if r := call(t, addr, pull); r.Code == protocol.NoPermission {
		t.Fatal("deleted group's settings still apply")
	}
}
