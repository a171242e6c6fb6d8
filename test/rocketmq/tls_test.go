//go:build !race

// (rocketmq-client-go's push consumer races on its own process queue at
// Shutdown — a send on the channel Shutdown closes — which failed the race
// run once; scripts/test.sh runs this test without -race.)

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

// TestRemotingTLS: rocketmq-client-go with WithTls(true) produces and
// consumes over TLS on the remoting port, which plaintext clients share.
func TestRemotingTLS(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "tls-topic", 2)
	p := startProducer(t, addr, "tls-pg", producer.WithTls(true))
	for i := range 20 {
		if _, err := p.SendSync(context.Background(), primitive.NewMessage("tls-topic", []byte(fmt.Sprint("m", i)))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]bool{}
	stop := startConsumer(t, addr, "tls-cg", "tls-topic", consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[string(m.Body)] = true
		}
		return consumer.ConsumeSuccess, nil
	}, consumer.WithTls(true))
	defer stop()
	eventually(t, 30*time.Second, "20 messages over TLS", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 20
	})
	plain := startProducer(t, addr, "plain-pg")
	if _, err := plain.SendSync(context.Background(), primitive.NewMessage("tls-topic", []byte("plain"))); err != nil {
		t.Fatal(err)
	}
}
