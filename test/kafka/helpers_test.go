// Package kafka_test drives Rosetta's Kafka front-end with real clients.
package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func startNode(t *testing.T) *apptest.TestNode {
	t.Helper()
	return apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// volume is n records, or a fifth of them under the race detector: enough
// batches and partitions to cover every path, at a fifth of the time.
func volume(n int) int {
	if raceDetector {
		return n / 5
	}
	return n
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	apptest.Eventually(t, d, what, cond)
}
