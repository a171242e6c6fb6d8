package rocketmq_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/twmb/franz-go/pkg/kgo"

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
		ExtFields: protocol.FieldsOf(map[string]string{"topic": "made-by-admin", "queueId": "0"})}); r.Code != protocol.Success || r.Ext("timestamp") != "-1" {
		t.Fatalf("earliest store time of an empty queue: %d %v", r.Code, r.ExtFields)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.GetConsumerConnectionList,
		ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "nobody"})}); r.Code != protocol.ConsumerNotOnline {
		t.Fatalf("connections of an empty group: %d", r.Code)
	}
	if err := adm.DeleteTopic(ctx, admin.WithTopicDelete("made-by-admin"), admin.WithBrokerAddrDelete(addr),
		admin.WithNameSrvAddr([]string{addr})); err != nil {
		t.Fatal(err)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.GetRouteInfoByTopic,
		ExtFields: protocol.FieldsOf(map[string]string{"topic": "made-by-admin"})}); r.Code != protocol.TopicNotExist {
		t.Fatalf("route of a deleted topic: %d", r.Code)
	}
}

// TestRequestMetrics: /metrics counts and times requests per protocol and
// request.
func TestRequestMetrics(t *testing.T) {
	n := startNode(t)
	call(t, n.RemotingAddr(), &protocol.Command{Code: protocol.GetBrokerClusterInfo})
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if err := kc.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + n.App.Addr("http") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`rosetta_requests_seconds_count{proto="remoting",request="106"} 1`,
		`rosetta_requests_seconds_count{proto="kafka",request="Metadata"}`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, grepLines(string(body), "rosetta_requests_seconds_count"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
