package rocketmq_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestRemotingCompactionTopic: a topic created with RocketMQ 5's
// +cleanup.policy=COMPACTION attribute keeps the latest message per key
// (the first of KEYS) once compacted; its retention attribute is kept.
func TestRemotingCompactionTopic(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	if r := call(t, addr, &protocol.Command{Code: protocol.UpdateAndCreateTopic, ExtFields: protocol.FieldsOf(map[string]string{
		"topic": "rmq-compacted", "writeQueueNums": "1", "readQueueNums": "1",
		"attributes": "+cleanup.policy=COMPACTION,+retention.ms=-1"})}); r.Code != protocol.Success {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	if r := call(t, addr, &protocol.Command{Code: protocol.UpdateAndCreateTopic, ExtFields: protocol.FieldsOf(map[string]string{
		"topic": "rmq-bad-attr", "attributes": "+cleanup.policy=SOMETIMES"})}); r.Code != protocol.InvalidParameter {
		t.Fatalf("bad attribute: %d %s", r.Code, r.Remark)
	}
	p := startProducer(t, addr, "compact-pg")
	for i := range 50 {
		m := primitive.NewMessage("rmq-compacted", []byte(fmt.Sprintf("v%d", i)))
		m.WithKeys([]string{fmt.Sprintf("k%d", i%5), "other"})
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post("http://"+n.HTTPAddr()+"/api/v1/storage/compact", "", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("compact: %v %v", err, resp)
	}
	resp.Body.Close()
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("rmq-compacted"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	got := map[string]int64{}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for len(got) < 5 && ctx.Err() == nil {
		kc.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r.Offset })
	}
	more, cancelMore := context.WithTimeout(ctx, time.Second) // anything left over would show here
	kc.PollFetches(more).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r.Offset })
	cancelMore()
	if len(got) != 5 || got["v45"] != 45 || got["v49"] != 49 {
		t.Fatalf("after compaction: %v", got)
	}
}
