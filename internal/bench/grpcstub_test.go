//go:build !race

// The v5 client races on its own settings: run without -race.

package bench

import (
	"context"
	"net"
	"testing"
	"time"
)

// The stub answers the v5 client's sends, receives and acks, so that the
// bench's gRPC workloads run against it as against a broker.
func TestGRPCStubServesTheClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- GRPCStubServe(ctx, l, GRPCStubOptions{Size: 128}) }()
	o := GRPCOptions{Endpoint: l.Addr().String(), Topic: "stub-topic", Group: "stub-group", Size: 128, Messages: 200,
		Senders: 4, Receivers: 2, Batch: 16}
	if r, err := GRPCSend(ctx, o); err != nil || r.Messages != 200 {
		t.Fatalf("send: %v %+v", err, r)
	}
	for _, inflight := range []int{1, 16} {
		o.AckInflight = inflight
		r, err := GRPCReceive(ctx, o)
		if err != nil || r.Messages < 200 {
			t.Fatalf("receive, %d acks in flight: %v %+v", inflight, err, r)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
