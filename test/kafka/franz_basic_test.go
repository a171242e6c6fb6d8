package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestFranzProduceConsumeSmall(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, 60*time.Second)
	p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("basic"), kgo.AllowAutoTopicCreation())
	for i := 0; i < 100; i++ {
		if err := p.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	c := newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("basic"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < 100 {
		fs := c.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got++ })
	}
}
