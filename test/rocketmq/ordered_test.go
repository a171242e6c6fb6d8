// The Go client's orderly consumer reads its process queue without a lock
// (a data race in rocketmq-client-go, not in Rosetta), so this test is left
// out of race-detector builds; scripts/test.sh runs it without -race.

//go:build !race

package rocketmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// TestOrderedConsumption: messages sent to chosen queues are consumed by two
// orderly consumers of one group, each queue by one consumer at a time (the
// broker's queue locks), every queue in send order.
func TestOrderedConsumption(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	// Eight queues, messages in the first four: the Go client never unlocks
	// a queue a rebalance takes from an orderly consumer (its lease runs
	// out after 60 s), so the test keeps the messages where the first
	// consumer keeps them.
	createTopic(t, addr, "ordered", 8)
	p := startProducer(t, addr, "ordered-pg", producer.WithQueueSelector(producer.NewManualQueueSelector()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const perQueue, queues = 50, 4
	for i := 0; i < perQueue; i++ {
		for q := 0; q < queues; q++ {
			m := primitive.NewMessage("ordered", []byte(fmt.Sprintf("%d:%d", q, i)))
			m.Queue = &primitive.MessageQueue{Topic: "ordered", BrokerName: "rosetta", QueueId: q}
			if _, err := p.SendSync(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	next := map[int]int{}
	for c := 0; c < 2; c++ {
		startConsumer(t, addr, "ordered-cg", "ordered", consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				var q, i int
				fmt.Sscanf(string(m.Body), "%d:%d", &q, &i)
				if i < next[q] {
					continue // redelivered after a rebalance: at least once
				}
				if i != next[q] {
					t.Errorf("queue %d: got %d, want %d", q, i, next[q])
				}
				next[q] = i + 1
			}
			return consumer.ConsumeSuccess, nil
		}, consumer.WithConsumerOrder(true))
	}
	eventually(t, time.Minute, "every queue consumed in order", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for q := 0; q < queues; q++ {
			if next[q] != perQueue {
				return false
			}
		}
		return true
	})
}

// TestOrderedThroughConsumerRestart: messages of one key go to one queue
// (the producer's hash selector); an orderly consumer stopped part-way and
// a new one of the same group continue every key in order, from the
// committed offsets (redelivery of the last unacknowledged ones allowed,
// never a gap or a reordering).
func TestOrderedThroughConsumerRestart(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "okr-pg", producer.WithQueueSelector(producer.NewHashQueueSelector()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const keys, perKey = 6, 60
	send := func(from, to int) {
		for i := from; i < to; i++ {
			for k := 0; k < keys; k++ {
				m := primitive.NewMessage("ordered-keys", []byte(fmt.Sprintf("k%d:%d", k, i)))
				m.WithShardingKey(fmt.Sprintf("key-%d", k))
				if _, err := p.SendSync(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	send(0, perKey/2)
	var mu sync.Mutex
	next := map[int]int{}
	total := 0
	consume := func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			var k, i int
			fmt.Sscanf(string(m.Body), "k%d:%d", &k, &i)
			if i < next[k] {
				continue // redelivered after the restart: at least once
			}
			if i != next[k] {
				t.Errorf("key %d: got %d, want %d", k, i, next[k])
			}
			next[k] = i + 1
			total++
		}
		return consumer.ConsumeSuccess, nil
	}
	stop := startConsumer(t, addr, "okr-cg", "ordered-keys", consumer.MessageSelector{}, consume, consumer.WithConsumerOrder(true))
	eventually(t, time.Minute, "part of the messages consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total >= keys*perKey/4
	})
	stop()
	startConsumer(t, addr, "okr-cg", "ordered-keys", consumer.MessageSelector{}, consume, consumer.WithConsumerOrder(true))
	send(perKey/2, perKey)
	eventually(t, time.Minute, "every key consumed in order", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := 0; k < keys; k++ {
			if next[k] != perKey {
				return false
			}
		}
		return true
	})
}
