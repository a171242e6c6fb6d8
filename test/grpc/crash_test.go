//go:build !race

package grpc_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

const (
	crashDirEnv  = "ROSETTA_GRPC_CRASH_DIR"
	crashAddrEnv = "ROSETTA_GRPC_CRASH_ADDR"
)

// TestGRPCCrashChild runs a node for TestPopStateSurvivesSIGKILL until it
// is killed.
func TestGRPCCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestPopStateSurvivesSIGKILL")
	}
	cfg := apptest.TestConfig(dir)
	cfg.Storage.Durability = "sync"
	cfg.Listen.HTTP, cfg.Listen.Kafka, cfg.Listen.Remoting = "", "", ""
	cfg.Listen.GRPC = os.Getenv(crashAddrEnv)
	n := apptest.StartTestNode(t, cfg)
	fmt.Printf("GRPC_ADDR=%s\n", n.GRPCAddr())
	select {} // until SIGKILL
}

// TestPopStateSurvivesSIGKILL: a node (sync durability) is SIGKILLed after
// a SimpleConsumer received 40 messages and acknowledged 20; after the
// restart the acknowledged ones never come back and the others come back
// once their invisible time has passed, with attempt 2.
func TestPopStateSurvivesSIGKILL(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := func() func() {
		cmd, got := apptest.StartChild(t, "TestGRPCCrashChild", []string{crashDirEnv + "=" + dir, crashAddrEnv + "=" + addr}, "GRPC_ADDR=")
		if got != addr {
			t.Fatalf("child on %s, want %s", got, addr)
		}
		return func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	kill := start()
	defer func() { kill() }()
	const topic = "grpc-crash"
	p := startProducer(t, addr, rmq.WithTopics(topic))
	for i := range 40 {
		if _, err := p.Send(context.Background(), &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint("c", i))}); err != nil {
			t.Fatal(err)
		}
	}
	sc := startSimpleConsumer(t, addr, "crash-group", topic)
	acked, held := map[string]bool{}, map[string]bool{}
	eventually(t, 30*time.Second, "every message once", func() bool {
		for _, mv := range receive(t, sc, 32, 10*time.Second) {
			if len(acked) < 20 {
				if err := sc.Ack(context.Background(), mv); err != nil {
					t.Fatal(err)
				}
				acked[string(mv.GetBody())] = true
			} else {
				held[string(mv.GetBody())] = true
			}
		}
		return len(acked)+len(held) == 40
	})
	received := time.Now()
	kill()
	kill = start()
	again := map[string]int32{}
	eventually(t, 60*time.Second, "the unacknowledged messages again", func() bool {
		for _, mv := range receive(t, sc, 32, 10*time.Second) {
			if time.Since(received) < 10*time.Second {
				t.Errorf("%s back before its invisible time", mv.GetBody())
			}
			again[string(mv.GetBody())] = mv.GetDeliveryAttempt()
			_ = sc.Ack(context.Background(), mv)
		}
		return len(again) >= len(held)
	})
	for _, mv := range receive(t, sc, 32, 10*time.Second) {
		again[string(mv.GetBody())] = mv.GetDeliveryAttempt()
	}
	for body, attempt := range again {
		if acked[body] || !held[body] || attempt != 2 {
			t.Errorf("%s back (attempt %d): acked %v held %v", body, attempt, acked[body], held[body])
		}
	}
}
