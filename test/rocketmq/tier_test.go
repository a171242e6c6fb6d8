package rocketmq_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

func tieredBody(i int) []byte {
	return append(fmt.Appendf(nil, "m%05d|", i), bytes.Repeat([]byte{byte(i)}, 700+i%300)...)
}

// TestTieredHistoryRemoting: messages whose segments went to the bucket
// and left local disk are consumed from the first offset by a push consumer
// byte-exact, and found by key.
func TestTieredHistoryRemoting(t *testing.T) {
	c := apptest.TestConfig(t.TempDir())
	apptest.WithTestBucket(t, &c)
	n := apptest.StartTestNode(t, c)
	addr := n.RemotingAddr()
	createTopic(t, addr, "tiered", 2)
	// Thousands of asynchronous sends on a busy machine: give each time.
	p := startProducer(t, addr, "tier-pg", producer.WithSendMsgTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const total = 3000
	var wg sync.WaitGroup
	for i := range total {
		m := primitive.NewMessage("tiered", tieredBody(i))
		m.WithKeys([]string{fmt.Sprintf("key-%d", i)})
		wg.Add(1)
		if err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil || r.Status != primitive.SendOK {
				t.Errorf("send %d: %v %v", i, r, err)
			}
		}, m); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if segments, local := apptest.TierNow(t, n); segments < 2 || local != 0 {
		t.Fatalf("%d segments tiered, %d still local", segments, local)
	}

	// The first message's key finds it in the bucket.
	ext := map[string]string{"topic": "tiered", "key": "key-0", "maxNum": "8", "beginTimestamp": "0",
		"endTimestamp": strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)}
	resp := call(t, addr, &protocol.Command{Code: protocol.QueryMessage, ExtFields: protocol.FieldsOf(ext)})
	if msgs := primitive.DecodeMessage(resp.Body); resp.Code != protocol.Success || len(msgs) != 1 || !bytes.Equal(msgs[0].Body, tieredBody(0)) {
		t.Fatalf("query by key of a tiered message: code %d %s, %d messages", resp.Code, resp.Remark, len(msgs))
	}

	var mu sync.Mutex
	seen := map[int]bool{}
	bad := 0
	startConsumer(t, addr, "tier-cg", "tiered", consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			var i int
			if _, err := fmt.Sscanf(string(m.Body), "m%05d|", &i); err != nil || !bytes.Equal(m.Body, tieredBody(i)) {
				bad++
				continue
			}
			seen[i] = true
		}
		return consumer.ConsumeSuccess, nil
	})
	eventually(t, time.Minute, "every tiered message consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == total
	})
	if bad != 0 {
		t.Fatalf("%d messages differ from what was sent", bad)
	}
}
