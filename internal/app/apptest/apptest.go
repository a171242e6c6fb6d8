// Package apptest starts Rosetta nodes in-process for integration tests.
package apptest

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/app"
)

// EnvLogFile names a file a test node appends its info-level log to (for
// tests that show the logs of their child processes when they fail);
// ROSETTA_TEST_LOG, sending the log to stderr, takes precedence.
const EnvLogFile = "ROSETTA_TEST_LOG_FILE"

// TestNode is a node started in-process on ephemeral loopback ports, for
// integration tests.
type TestNode struct {
	App    *app.App
	Config app.Config
	cancel context.CancelFunc
	done   chan error
}

// TestConfig returns a configuration for an in-process test node in dir.
func TestConfig(dir string) app.Config {
	c := app.DefaultConfig()
	c.DataDir = dir
	c.Listen = app.ListenConfig{Kafka: "127.0.0.1:0", HTTP: "127.0.0.1:0", Remoting: "127.0.0.1:0", GRPC: "127.0.0.1:0", Pulsar: "127.0.0.1:0", PulsarSSL: "127.0.0.1:0",
		MQTT: "127.0.0.1:0", MQTTSSL: "127.0.0.1:0"}
	c.Storage.MinFreeBytes, c.Storage.MinFreeRatio = 0, 0
	c.Storage.SegmentSize = 64 << 20
	c.Storage.MaxRecordSize = 8 << 20
	c.Log.Level = "warn"
	return c
}

// StartTestNode starts a node with c and stops it when the test ends.
func StartTestNode(t testing.TB, c app.Config) *TestNode {
	t.Helper()
	var w io.Writer = io.Discard
	if os.Getenv("ROSETTA_TEST_LOG") != "" {
		w = os.Stderr
		c.Log.Level = os.Getenv("ROSETTA_TEST_LOG")
	} else if path := os.Getenv(EnvLogFile); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		w = f
		c.Log.Level = "info"
	}
	log, err := app.NewLogger(c.Log, w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, c, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	n := &TestNode{App: a, Config: c, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { n.done <- a.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-n.done:
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(t) })
	return n
}

// Done delivers what Run returned when the node ended by itself (a
// cluster member that fetched a snapshot ends with
// app.ErrRestartToInstall).
func (n *TestNode) Done() <-chan error { return n.done }

// Stop shuts the node down (idempotent).
func (n *TestNode) Stop(t testing.TB) {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("node stopped with error: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("node did not stop within 30s")
	}
}

// RemotingAddr is the RocketMQ remoting listener's address.
func (n *TestNode) RemotingAddr() string { return n.App.Addr("remoting") }

// KafkaAddr is the Kafka listener's address.
func (n *TestNode) KafkaAddr() string { return n.App.Addr("kafka") }

// GRPCAddr is the node's RocketMQ 5 gRPC address.
func (n *TestNode) GRPCAddr() string { return n.App.Addr("grpc") }

// HTTPAddr is the admin HTTP listener's address.
func (n *TestNode) HTTPAddr() string { return n.App.Addr("http") }

// PulsarURL is the node's pulsar:// service URL.
func (n *TestNode) PulsarURL() string { return "pulsar://" + n.App.Addr("pulsar") }

// MQTTURL is the node's tcp:// MQTT address.
func (n *TestNode) MQTTURL() string { return "tcp://" + n.App.Addr("mqtt") }

// PulsarSSLURL is the node's pulsar+ssl:// service URL.
func (n *TestNode) PulsarSSLURL() string { return "pulsar+ssl://" + n.App.Addr("pulsar-ssl") }
