package rocketmq_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestClientTraceIsStoredAndFound: a producer and a push consumer with
// message trace on (rocketmq-client-go's WithTrace) send their trace
// records to RMQ_SYS_TRACE_TOPIC — which exists although topic
// auto-creation is off — and QUERY_MESSAGE on that topic by the traced
// message id finds them, as RocketMQ Dashboard's trace view looks them up:
// the send (Pub) and the consumption (SubBefore, SubAfter).
//
// The client keeps one process-wide trace client bound to the first name
// server it was given (a second node's address gets a nil dispatcher and
// a panic), so this is the package's only traced test and runs once per
// process.
func TestClientTraceIsStoredAndFound(t *testing.T) {
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Broker.AutoCreateTopics = false
	n := apptest.StartTestNode(t, cfg)
	addr := n.RemotingAddr()
	createTopic(t, addr, "traced", 2)
	trace := &primitive.TraceConfig{GroupName: "trace-group", Access: primitive.Local, NamesrvAddrs: []string{addr}}
	p := startProducer(t, addr, "traced-pg", producer.WithTrace(trace))
	res, err := p.SendSync(context.Background(), primitive.NewMessage("traced", []byte("follow me")).WithKeys([]string{"order-7"}))
	if err != nil {
		t.Fatal(err)
	}
	got := &received{seen: map[string]*primitive.MessageExt{}}
	startPushConsumer(t, addr, "traced-cg", "traced", "*", got, consumer.WithTrace(trace))
	eventually(t, 20*time.Second, "the message consumed", func() bool { return got.count() == 1 })

	var records []string
	eventually(t, 30*time.Second, "the send and the consumption traced", func() bool {
		resp := call(t, addr, &protocol.Command{Code: protocol.QueryMessage, ExtFields: protocol.FieldsOf(map[string]string{
			"topic": "RMQ_SYS_TRACE_TOPIC", "key": res.MsgID, "maxNum": "64", "beginTimestamp": "0",
			"endTimestamp": "9223372036854775807"})})
		if resp.Code != protocol.Success {
			return false
		}
		records = nil
		for _, m := range primitive.DecodeMessage(resp.Body) {
			for _, r := range strings.Split(string(m.Body), "\x02") {
				if strings.Contains(r, res.MsgID) {
					records = append(records, r)
				}
			}
		}
		return traced(records, "Pub") && traced(records, "SubBefore") && traced(records, "SubAfter")
	})
	for _, r := range records {
		if f := strings.Split(r, "\x01"); f[0] == "Pub" && (f[4] != "traced" || f[3] != "traced-pg") {
			t.Errorf("send trace names topic %q, group %q: %q", f[4], f[3], r)
		}
	}
	// Listed like any topic.
	resp := call(t, addr, &protocol.Command{Code: protocol.GetAllTopicListFromNameserver})
	var list struct {
		TopicList []string `json:"topicList"`
	}
	if err := json.Unmarshal(resp.Body, &list); err != nil || !strings.Contains(strings.Join(list.TopicList, ","), "RMQ_SYS_TRACE_TOPIC") {
		t.Errorf("topic list %v (%v) lacks the trace topic", list.TopicList, err)
	}
}

// traced reports whether records hold one of the trace type.
func traced(records []string, typ string) bool {
	for _, r := range records {
		if strings.HasPrefix(r, typ+"\x01") {
			return true
		}
	}
	return false
}
