package grpcv5

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/storage"
)

// TestServeEndsConnectionsWhenListenerCloses: a cluster member ending its
// term closes the term's listeners before it cancels the term. The
// connections the listener took must end then too — a client whose
// connection went on being answered by the ended term's server (its
// broker stopped) would, for a SimpleConsumer, receive nothing from that
// group for as long as the connection lived.
func TestServeEndsConnectionsWhenListenerCloses(t *testing.T) {
	dir := t.TempDir()
	c := storage.DefaultConfig(filepath.Join(dir, "data"))
	c.SegmentSize, c.MaxRecordSize, c.MinFreeBytes, c.MinFreeRatio = 8<<20, 1<<20, 0, 0
	e, err := storage.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, err := broker.New(context.Background(), e, m, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // the term is cancelled only after the test looked
	served := make(chan error, 1)
	go func() { served <- NewServer(b, Options{}).Serve(ctx, l) }()

	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := v2.NewMessagingServiceClient(cc)
	call := func() error {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		_, err := client.Heartbeat(cctx, &v2.HeartbeatRequest{})
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("a call while serving: %v", err)
	}

	l.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after its listener closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its listener closed")
	}
	// The connection is gone and the listener with it: a call cannot be
	// answered by the stopped server.
	if err := call(); err == nil {
		t.Fatal("a call after the listener closed was answered: the connection outlived its server")
	}
}
