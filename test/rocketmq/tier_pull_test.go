// The Go client's pull consumer races with itself (see pull_test.go), so
// this test is left out of race-detector builds; scripts/test.sh runs it
// without -race.

//go:build !race

package rocketmq_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestTieredHistoryPullConsumer: a pull consumer pulls every queue from its
// first offset, byte-exact, after the segments went to the bucket and left
// local disk.
func TestTieredHistoryPullConsumer(t *testing.T) {
	c := apptest.TestConfig(t.TempDir())
	apptest.WithTestBucket(t, &c)
	n := apptest.StartTestNode(t, c)
	addr := n.RemotingAddr()
	createTopic(t, addr, "tiered-pull", 2)
	p := startProducer(t, addr, "tier-pull-pg", producer.WithSendMsgTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const total = 2500
	var wg sync.WaitGroup
	for i := range total {
		wg.Add(1)
		if err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil || r.Status != primitive.SendOK {
				t.Errorf("send %d: %v %v", i, r, err)
			}
		}, primitive.NewMessage("tiered-pull", tieredBody(i))); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if segments, local := apptest.TierNow(t, n); segments < 2 || local != 0 {
		t.Fatalf("%d segments tiered, %d still local", segments, local)
	}
	pc, err := rocketmq.NewPullConsumer(consumer.WithGroupName("tier-pull-g"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})), consumer.WithInstance("tier-pull-1"))
	if err != nil {
		t.Fatal(err)
	}
	mqs := []*primitive.MessageQueue{{Topic: "tiered-pull", BrokerName: "rosetta", QueueId: 0}, {Topic: "tiered-pull", BrokerName: "rosetta", QueueId: 1}}
	if err := pc.Assign("tiered-pull", mqs); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()
	seen := map[int]bool{}
	for q, mq := range mqs {
		for off := int64(0); ; {
			res, err := pc.PullFrom(ctx, mq, off, 32)
			if err != nil {
				t.Fatalf("pull queue %d at %d: %v", q, off, err)
			}
			if res.Status != primitive.PullFound {
				break
			}
			for _, m := range res.GetMessageExts() {
				var i int
				if _, err := fmt.Sscanf(string(m.Body), "m%05d|", &i); err != nil || !bytes.Equal(m.Body, tieredBody(i)) {
					t.Fatalf("queue %d offset %d: a message that was never sent", q, m.QueueOffset)
				}
				seen[i] = true
			}
			if off = res.NextBeginOffset; off >= res.MaxOffset {
				break // a pull at the end would wait for new messages
			}
		}
	}
	if len(seen) != total {
		t.Fatalf("pulled %d of %d tiered messages", len(seen), total)
	}
}
