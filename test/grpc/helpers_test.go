//go:build !race

// The tests drive Rosetta's RocketMQ 5 gRPC front-end with the
// official Go client (github.com/apache/rocketmq-clients/golang/v5).
//
// The client applies settings the server sends without a lock while its
// periodic settings sync reads them (a data race in rocketmq-clients, not
// in Rosetta, and any server answering settings triggers it), so these
// tests are left out of race-detector builds; scripts/test.sh runs them
// without -race.

package grpc_test

import (
	"context"
	"os"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func TestMain(m *testing.M) {
	// The client logs to a file under $HOME by default; keep it in a
	// temporary directory. The clients keep their default TLS (the node
	// serves TLS and plaintext on one port; TestBadInputGetsCodes speaks
	// plaintext).
	dir, _ := os.MkdirTemp("", "rmq-client-log")
	os.Setenv("rocketmq.client.logRoot", dir)
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func config(addr string) *rmq.Config {
	return &rmq.Config{Endpoint: addr, Credentials: &credentials.SessionCredentials{}}
}

// startProducer starts a v5 producer declaring topics; it stops with the test.
func startProducer(t *testing.T, addr string, opts ...rmq.ProducerOption) rmq.Producer {
	t.Helper()
	p, err := rmq.NewProducer(config(addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.GracefulStop() })
	return p
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	apptest.Eventually(t, d, what, cond)
}

// kafkaRecords reads a topic from the start with a Kafka consumer until n
// records arrived (or the deadline), calling fn for each.
func kafkaRecords(t *testing.T, addr, topic string, n int, within time.Duration, fn func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(within)
	got := 0
	for got < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got++
			fn(r)
		})
	}
	if got < n {
		t.Fatalf("%d of %d records of %s arrived", got, n, topic)
	}
}
