package rocketmq_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestPullFiltersOnBroker: a raw PULL_MESSAGE with a tag or SQL92
// subscription returns only matching messages (the client's own tag check
// is not involved), and its next offset moves past the skipped ones.
func TestPullFiltersOnBroker(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "filtered", 1)
	p := startProducer(t, addr, "filter-pg")
	for i := 0; i < 30; i++ {
		m := primitive.NewMessage("filtered", []byte(fmt.Sprint("f", i)))
		m.WithTag([]string{"A", "B", "C"}[i%3])
		m.WithProperty("n", strconv.Itoa(i))
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	pull := func(typ, expr string) ([]*primitive.MessageExt, string) {
		r := call(t, addr, &protocol.Command{Code: protocol.PullMessage, ExtFields: protocol.FieldsOf(map[string]string{
			"consumerGroup": "filter-g", "topic": "filtered", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
			"sysFlag": "4", "subscription": expr, "expressionType": typ})})
		if r.Code != protocol.Success {
			t.Fatalf("%s %q: code %d %s", typ, expr, r.Code, r.Remark)
		}
		return primitive.DecodeMessage(r.Body), r.Ext("nextBeginOffset")
	}
	msgs, next := pull("TAG", "B || C")
	if len(msgs) != 20 || next != "30" {
		t.Fatalf("tag pull: %d messages, next %s", len(msgs), next)
	}
	for _, m := range msgs {
		if m.GetTags() == "A" {
			t.Fatalf("tag pull returned %s with tag A", m.Body)
		}
	}
	msgs, _ = pull("SQL92", "n >= 25 AND TAGS <> 'A'")
	if len(msgs) != 4 { // 25 B, 26 C, 28 B, 29 C
		t.Fatalf("SQL92 pull: %d messages", len(msgs))
	}
	for _, m := range msgs {
		if v, _ := strconv.Atoi(m.GetProperty("n")); v < 25 || m.GetTags() == "A" {
			t.Fatalf("SQL92 pull returned %s", m.Body)
		}
	}
}
