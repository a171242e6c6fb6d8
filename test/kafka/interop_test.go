package kafka_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKafkaJS runs the kafkajs producer and consumer group script
// (interop/kafkajs, installed with npm ci by scripts/test.sh).
func TestKafkaJS(t *testing.T) {
	node := requireTool(t, "node")
	dir, _ := filepath.Abs("interop/kafkajs")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("kafkajs not installed (scripts/test.sh runs npm ci)")
		}
		t.Skip("kafkajs not installed: run npm ci in test/kafka/interop/kafkajs")
	}
	n := startNode(t)
	out := run(t, 2*time.Minute, "", node, filepath.Join(dir, "interop.js"), n.KafkaAddr(), "kafkajs-topic", "1000")
	if !strings.Contains(out, "kafkajs ok: 1000 messages") {
		t.Fatalf("kafkajs:\n%s", out)
	}
}

// TestKafkaPython runs Debian's python3-kafka (2.0.2) producer and group
// consumer.
func TestKafkaPython(t *testing.T) {
	py := requireTool(t, "/usr/bin/python3")
	if err := runQuiet(py, "-c", "import kafka"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3-kafka not installed (scripts/test.sh installs it)")
		}
		t.Skip("python3-kafka not installed")
	}
	n := startNode(t)
	out := run(t, 2*time.Minute, "", py, "interop/kafka_python.py", n.KafkaAddr(), "python-topic", "500")
	if !strings.Contains(out, "kafka-python ok: 500 messages") {
		t.Fatalf("kafka-python:\n%s", out)
	}
}
