package rocketmq_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// TestRemotingQuotas: sends to a RocketMQ namespace over its produce byte
// rate are refused as busy (RocketMQ's flow control) while another
// namespace's are not; past its storage quota sends are refused with
// NO_PERMISSION naming the quota.
func TestRemotingQuotas(t *testing.T) {
	n := startNode(t)
	put := func(path, body string) {
		req, _ := http.NewRequest(http.MethodPut, "http://"+n.HTTPAddr()+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %s: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}
	put("/api/v1/quotas/namespace/public/slow", `{"produceBytesPerSecond": 65536}`)
	put("/api/v1/quotas/namespace/public/tiny", `{"storageBytes": 50000}`)
	body := make([]byte, 16<<10)
	_, _ = rand.Read(body)
	send := func(p interface {
		SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
	}, topic string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.SendSync(ctx, primitive.NewMessage(topic, body))
		return err
	}
	slow := startProducer(t, n.RemotingAddr(), "quota-slow", producer.WithNamespace("slow"), producer.WithRetry(0))
	fast := startProducer(t, n.RemotingAddr(), "quota-fast", producer.WithNamespace("fast"), producer.WithRetry(0))
	busy := 0
	for range 20 { // 320 KiB against 64 KiB/s: most are refused
		if err := send(slow, "orders"); err != nil {
			if !strings.Contains(err.Error(), "QUOTA") {
				t.Fatalf("refusal: %v", err)
			}
			busy++
		}
		if err := send(fast, "orders"); err != nil {
			t.Fatalf("a namespace without a quota: %v", err)
		}
	}
	if busy < 10 {
		t.Fatalf("only %d of 20 sends over the rate were refused", busy)
	}
	tiny := startProducer(t, n.RemotingAddr(), "quota-tiny", producer.WithNamespace("tiny"), producer.WithRetry(0))
	for range 4 {
		if err := send(tiny, "orders"); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	eventually(t, 10*time.Second, "the storage quota refuses sends", func() bool {
		err = send(tiny, "orders")
		return err != nil
	})
	if !strings.Contains(err.Error(), "storage quota") {
		t.Fatalf("storage refusal: %v", err)
	}
}
