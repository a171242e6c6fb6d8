package rocketmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestRequestReply: a requester's Request returns the reply a responder
// (a push consumer answering with SEND_REPLY_MESSAGE) sends; the broker
// pushes it to the requester's connection.
func TestRequestReply(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	createTopic(t, addr, "rr", 2)
	responder := startProducer(t, addr, "rr-responder")
	// The responder may see a request again (at-least-once) after the test
	// is over and its requester gone: failures are reported, not t.Error'd
	// from the client's goroutine.
	var mu sync.Mutex
	var failures []error
	startConsumer(t, addr, "rr-g", "rr", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				reply, err := consumer.CreateReplyMessage(m, nil)
				if err == nil {
					reply.Body = append([]byte("re: "), m.Body...)
					_, err = responder.SendSync(ctx, reply)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	requester := startProducer(t, addr, "rr-requester")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, body := range []string{"ping", "pong"} {
		reply, err := requester.Request(ctx, 20*time.Second, primitive.NewMessage("rr", []byte(body)))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if string(reply.Body) != "re: "+body {
			t.Fatalf("request %d: reply %q", i, reply.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("responder failures: %v", failures)
	}
}
