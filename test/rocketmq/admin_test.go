package rocketmq_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestAdmin: the Go client's admin API creates and deletes topics; the
// topic config, earliest store time and consumer connections answer.
func TestAdmin(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{addr})))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate("made-by-admin"), admin.WithBrokerAddrCreate(addr),
		admin.WithWriteQueueNums(6), admin.WithReadQueueNums(6)); err != nil {
		t.Fatal(err)
	}
	resp := call(t, addr, &protocol.Command{Code: protocol.GetAllTopicConfig})
	var cfg struct {
		Table map[string]struct {
			WriteQueueNums int `json:"writeQueueNums"`
		} `json:"topicConfigTable"`
	}
	if err := json.Unmarshal(resp.Body, &cfg); err != nil || cfg.Table["made-by-admin"].WriteQueueNums != 6 {
		t.Fatalf("topic config: %s %v", resp.Body, err)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.GetEarliestMsgStoreTime,
		ExtFields: map[string]string{"topic": "made-by-admin", "queueId": "0"}}); r.Code != protocol.Success || r.Ext("timestamp") != "-1" {
		t.Fatalf("earliest store time of an empty queue: %d %v", r.Code, r.ExtFields)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.GetConsumerConnectionList,
		ExtFields: map[string]string{"consumerGroup": "nobody"}}); r.Code != protocol.ConsumerNotOnline {
		t.Fatalf("connections of an empty group: %d", r.Code)
	}
	if err := adm.DeleteTopic(ctx, admin.WithTopicDelete("made-by-admin"), admin.WithBrokerAddrDelete(addr),
		admin.WithNameSrvAddr([]string{addr})); err != nil {
		t.Fatal(err)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.GetRouteInfoByTopic,
		ExtFields: map[string]string{"topic": "made-by-admin"}}); r.Code != protocol.TopicNotExist {
		t.Fatalf("route of a deleted topic: %d", r.Code)
	}
}
