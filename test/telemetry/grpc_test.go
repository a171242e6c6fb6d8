//go:build !race

// The RocketMQ 5 client races on its own settings (see test/grpc), so its
// span check is left out of race-detector builds.

package telemetry_test

import (
	"context"
	"os"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestGRPCSendSpanJoinsClientTrace: a RocketMQ 5 send carrying a
// traceparent property gets a broker span in the client's trace.
func TestGRPCSendSpanJoinsClientTrace(t *testing.T) {
	dir := t.TempDir()
	os.Setenv("rocketmq.client.logRoot", dir)
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	col := newCollector(t)
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Telemetry.OTLPEndpoint = col.url
	cfg.Telemetry.BatchTimeout = 100 * time.Millisecond
	n := apptest.StartTestNode(t, cfg)
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: n.GRPCAddr(), Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics("traced-grpc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.GracefulStop()
	const traceID, parent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
	m := &rmq.Message{Topic: "traced-grpc", Body: []byte("receipt")}
	m.AddProperty("traceparent", "00-"+traceID+"-"+parent+"-01")
	if _, err := p.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 15*time.Second, "the send span exported", func() bool { return col.find("send traced-grpc", traceID, parent) != nil })
}
