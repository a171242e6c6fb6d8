package rocketmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// TestRequestReply: a requester's Request returns the reply a responder
// (a push consumer answering with SEND_REPLY_MESSAGE) sends; the broker
// pushes it to the requester's connection.
func TestRequestReply(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	if r := call(t, addr, &protocol.Command{Code: protocol.UpdateAndCreateTopic,
		ExtFields: map[string]string{"topic": "rr", "writeQueueNums": "2", "readQueueNums": "2"}}); r.Code != protocol.Success {
		t.Fatalf("create topic: %d", r.Code)
	}
	responder := startProducer(t, addr, "rr-responder")
	startConsumer(t, addr, "rr-g", "rr", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				reply, err := consumer.CreateReplyMessage(m, nil)
				if err != nil {
					t.Error(err)
					continue
				}
				reply.Body = append([]byte("re: "), m.Body...)
				if _, err := responder.SendSync(ctx, reply); err != nil {
					t.Error(err)
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
}
