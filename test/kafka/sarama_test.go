package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

type saramaHandler struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)] = true
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func (h *saramaHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// TestSarama runs sarama's sync producer and consumer group at its default
// protocol version and at its maximum.
func TestSarama(t *testing.T) {
	for name, version := range map[string]sarama.KafkaVersion{"default": sarama.NewConfig().Version, "max": sarama.MaxVersion} {
		t.Run(name, func(t *testing.T) {
			n := startNode(t)
			cfg := sarama.NewConfig()
			cfg.Version = version
			cfg.Producer.Return.Successes = true
			cfg.Producer.RequiredAcks = sarama.WaitForAll
			cfg.Producer.Compression = sarama.CompressionSnappy
			cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
			cfg.Consumer.Group.Session.Timeout = 6 * time.Second
			cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
			topic := "sarama-" + name
			prod, err := sarama.NewSyncProducer([]string{n.KafkaAddr()}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			const total = 500
			for i := 0; i < total; i++ {
				if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder(fmt.Sprint("m", i))}); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			group, err := sarama.NewConsumerGroup([]string{n.KafkaAddr()}, "sarama-group-"+name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer group.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h := &saramaHandler{seen: map[string]bool{}}
			go func() {
				for ctx.Err() == nil {
					if err := group.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
						t.Logf("consume: %v", err)
						time.Sleep(100 * time.Millisecond)
					}
				}
			}()
			eventually(t, 45*time.Second, "sarama group consumed everything", func() bool { return h.count() == total })
		})
	}
}
