// The Go client's pull consumer writes its consumer group field on every
// PullFrom while its own background puller reads it (a data race in
// rocketmq-client-go, not in Rosetta), so this test is left out of
// race-detector builds; scripts/test.sh runs it without -race.

//go:build !race

package rocketmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestPullConsumerSeeks: a pull consumer assigned a queue starts where it
// seeks, finds the offset of a time (SEARCH_OFFSET_BY_TIMESTAMP) and pulls
// from it.
func TestPullConsumerSeeks(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "seekable", 1)
	p := startProducer(t, addr, "seek-pg")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mark int64
	for i := 0; i < 20; i++ {
		if i == 12 {
			time.Sleep(5 * time.Millisecond)
			mark = time.Now().UnixMilli()
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := p.SendSync(ctx, primitive.NewMessage("seekable", []byte(fmt.Sprint("m", i)))); err != nil {
			t.Fatal(err)
		}
	}
	pc, err := rocketmq.NewPullConsumer(consumer.WithGroupName("seek-g"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})), consumer.WithInstance("seek-1"))
	if err != nil {
		t.Fatal(err)
	}
	mq := &primitive.MessageQueue{Topic: "seekable", BrokerName: "rosetta", QueueId: 0}
	if err := pc.Assign("seekable", []*primitive.MessageQueue{mq}); err != nil {
		t.Fatal(err)
	}
	pc.SeekOffset(mq, 5)
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()
	// next polls until a message arrives and returns its body and offset.
	next := func() (string, int64) {
		t.Helper()
		for ctx.Err() == nil {
			cr, err := pc.Poll(ctx, time.Second)
			if err != nil || cr == nil || len(cr.GetMsgList()) == 0 {
				continue
			}
			pc.ACK(ctx, cr, consumer.ConsumeSuccess)
			m := cr.GetMsgList()[0]
			return string(m.Body), m.QueueOffset
		}
		t.Fatal("no message polled")
		return "", 0
	}
	if body, off := next(); body != "m5" || off != 5 {
		t.Fatalf("after seeking to 5: %s at %d", body, off)
	}
	off, err := pc.OffsetForTimestamp(mq, mark)
	if err != nil || off != 12 {
		t.Fatalf("offset for the time before m12: %d %v", off, err)
	}
	// (The Go client drops the results of a seek made while a pull is in
	// flight, a check of its own, so the time is tested with PullFrom.)
	res, err := pc.PullFrom(ctx, mq, off, 3)
	if err != nil || res.Status != primitive.PullFound || len(res.GetMessageExts()) != 3 ||
		string(res.GetMessageExts()[0].Body) != "m12" || res.NextBeginOffset != 15 {
		t.Fatalf("pull from the time's offset: %v %+v", err, res)
	}
}
