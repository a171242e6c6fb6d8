package app

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/rosettamq/rosetta/internal/model"
)

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rosetta.yaml")
	yml := "data_dir: /from/yaml\nstorage:\n  durability: async\n  segment_size: 64MiB\nbroker:\n  default_queues: 4\n"
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"ROSETTA_STORAGE_DURABILITY=sync", "ROSETTA_BROKER_DEFAULT_QUEUES=6"}
	c, err := LoadConfig(path, env, map[string]string{"broker.default_queues": "12"})
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/from/yaml" || c.Storage.Durability != "sync" || c.Storage.SegmentSize != 64<<20 || c.Broker.DefaultQueues != 12 {
		t.Fatalf("config %+v", c)
	}
	if _, err := LoadConfig("", []string{"ROSETTA_STORAGE_DURABILITY=maybe"}, nil); err == nil {
		t.Fatal("bad durability accepted")
	}
	if err := os.WriteFile(path, []byte("storage:\n  no_such_knob: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path, nil, nil); err == nil {
		t.Fatal("unknown YAML key accepted")
	}
	for _, k := range Knobs() {
		if k.Help == "" {
			t.Errorf("knob %s has no help text", k.Path)
		}
	}
}

// TestListenHost: one flag moves every listener without a host of its own
// to the node's address.
func TestListenHost(t *testing.T) {
	c, err := LoadConfig("", []string{"ROSETTA_LISTEN_GRPC=0.0.0.0:8081"}, map[string]string{"listen.host": "127.0.0.11", "listen.remoting": ":19876"})
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Listen; l.Kafka != "127.0.0.11:9092" || l.HTTP != "127.0.0.11:8080" || l.Remoting != "127.0.0.11:19876" || l.GRPC != "0.0.0.0:8081" {
		t.Fatalf("listeners %+v", l)
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"1GiB": 1 << 30, "512k": 512 << 10, "100": 100, "1.5MiB": 3 << 19} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("%s: %d %v", in, got, err)
		}
	}
	if _, err := ParseByteSize("12 parsecs"); err == nil {
		t.Error("bad unit accepted")
	}
}

// TestServeAndShutdown starts a node on ephemeral ports, reads its metrics
// and health, and checks a graceful shutdown is prompt.
func TestServeAndShutdown(t *testing.T) {
	c := DefaultConfig()
	c.DataDir = t.TempDir()
	c.Listen = ListenConfig{HTTP: "127.0.0.1:0"}
	c.Storage.MinFreeBytes, c.Storage.MinFreeRatio = 0, 0
	c.Storage.SegmentSize = 8 << 20
	c.Storage.MaxRecordSize = 1 << 20
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, c, log)
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, func() { close(ready) }) }()
	<-ready
	name, _ := model.ParseTopicName("metrics-probe")
	if _, err := a.Broker().EnsureTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Broker().AppendMessages(ctx, name, 0, []model.Message{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + a.Addr("http")
	for path, want := range map[string]string{
		"/metrics":       "rosetta_storage_appended_messages_total",
		"/healthz":       `"status":"ok"`,
		"/api/v1/topics": "metrics-probe",
		"/debug/pprof/":  "goroutine",
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d, missing %q", path, resp.StatusCode, want)
		}
	}
	if !strings.Contains(fetch(t, base+"/metrics"), "rosetta_storage_fsync_seconds_bucket") {
		t.Error("no fsync histogram")
	}
	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("graceful shutdown took %v", time.Since(start))
}

func fetch(t *testing.T, url string) string {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestReplicationFactorConfig: an even replication factor is refused (it
// survives no more failures than the odd one below it).
func TestReplicationFactorConfig(t *testing.T) {
	c := DefaultConfig()
	c.Cluster.ReplicationFactor = 2
	if err := c.Validate(); err == nil {
		t.Fatal("a replication factor of 2 accepted")
	}
	c.Cluster.ReplicationFactor = 3
	if err := c.Validate(); err != nil {
		t.Fatalf("a replication factor of 3: %v", err)
	}
}
