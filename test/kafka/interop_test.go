package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestKafkaJS runs the kafkajs producer and consumer group script
// (interop/kafkajs, installed with npm ci by scripts/test.sh).
func TestKafkaJS(t *testing.T) {
	node, dir := nodeScript(t, "kafkajs", "kafkajs not installed (scripts/test.sh runs npm ci)", "node_modules", "kafkajs")
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

// TestKIP848Librdkafka runs current librdkafka (2.12, through node-rdkafka
// 3.6.1, interop/rdkafka) consumers with group.protocol=consumer, both
// server-side assignors, while a librdkafka producer writes and members
// join, leave and come back: every record consumed, no partition owned by
// two members at once, the group's commits cover every record, and the
// producer never logs a leader it does not know (KIP-951's CurrentLeader
// is sent only with a leader change).
func TestKIP848Librdkafka(t *testing.T) {
	node, dir := nodeScript(t, "rdkafka", "node-rdkafka not built (scripts/test.sh runs npm ci)", "node_modules", "node-rdkafka", "build", "Release")
	for _, assignor := range []string{"uniform", "range"} {
		t.Run(assignor, func(t *testing.T) {
			n := apptest.StartTestNode(t, kip848Config(t))
			ctx := ctxTimeout(t, 3*time.Minute)
			topic, group := "rdk848-"+assignor, "rdk-group-"+assignor
			adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
			if _, err := adm.CreateTopic(ctx, 16, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			const total = 4000 // produced by the script (librdkafka producer, lz4) as members change
			out := runUntilReported(t, 3*time.Minute, "rdkafka kip848 ok", node, filepath.Join(dir, "kip848.js"), n.KafkaAddr(), topic, group, strconv.Itoa(total), assignor)
			if !strings.Contains(out, fmt.Sprintf("rdkafka kip848 ok: %d records", total)) {
				t.Fatalf("node-rdkafka:\n%s", out)
			}
			if !strings.Contains(out, "cache warnings: 0") { // KIP-951 fields only with a leader change
				t.Fatalf("librdkafka's producer logged leaders it does not know:\n%s", out)
			}
			t.Log(out)
			// The members' commits outlive them.
			committed, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			committed.Each(func(o kadm.OffsetResponse) { sum += o.At })
			if sum != total {
				t.Fatalf("group committed %d records' worth of offsets, want %d", sum, total)
			}
		})
	}
}

// TestTransactionsKafkaJS runs kafkajs's transactional producer against
// read_committed and read_uncommitted consumers (interop/kafkajs/txn.js).
func TestTransactionsKafkaJS(t *testing.T) {
	node, dir := nodeScript(t, "kafkajs", "kafkajs not installed (scripts/test.sh runs npm ci)", "node_modules", "kafkajs")
	n := startNode(t)
	out := run(t, 2*time.Minute, "", node, filepath.Join(dir, "txn.js"), n.KafkaAddr(), "kafkajs-txn")
	if !strings.Contains(out, "kafkajs txn ok: 30 committed of 50") {
		t.Fatalf("kafkajs:\n%s", out)
	}
}

// TestTransactionsLibrdkafka runs a current librdkafka's (node-rdkafka)
// transactional producer against read_committed and read_uncommitted
// consumers (interop/rdkafka/txn.js).
func TestTransactionsLibrdkafka(t *testing.T) {
	node, dir := nodeScript(t, "rdkafka", "node-rdkafka not built (scripts/test.sh runs npm ci)", "node_modules", "node-rdkafka", "build", "Release")
	n := startNode(t)
	out := run(t, 2*time.Minute, "", node, filepath.Join(dir, "txn.js"), n.KafkaAddr(), "rdkafka-txn")
	if !strings.Contains(out, "rdkafka txn ok: 30 committed of 50") {
		t.Fatalf("node-rdkafka:\n%s", out)
	}
	t.Log(out)
}

// nodeScript returns node and the absolute path of interop/<sub>, whose
// installed modules are checked at the path parts of probe: a CI run fails
// without them (scripts/test.sh installs them), a local run skips.
func nodeScript(t *testing.T, sub, missing string, probe ...string) (string, string) {
	t.Helper()
	node := requireTool(t, "node")
	dir, _ := filepath.Abs(filepath.Join("interop", sub))
	if _, err := os.Stat(filepath.Join(append([]string{dir}, probe...)...)); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(missing)
		}
		t.Skip(missing + ": run npm ci in test/kafka/interop/" + sub)
	}
	return node, dir
}

// runUntilReported runs a script until it exits or, once its output holds
// the line reporting its outcome, for 10 s more: node-rdkafka can hang at
// exit when librdkafka hands a member that is disconnecting an assignment
// node-rdkafka refuses ("KafkaConsumer is disconnected") — its close then
// waits forever, and so does process.exit. The outcome is reported by then,
// so the process is killed and the output judged.
func runUntilReported(t *testing.T, timeout time.Duration, reported, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var reportedAt time.Time
	for {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
			}
			return out.String()
		case <-tick.C:
			if reportedAt.IsZero() && strings.Contains(out.String(), reported) {
				reportedAt = time.Now()
			}
			if !reportedAt.IsZero() && time.Since(reportedAt) >= 10*time.Second {
				t.Logf("%s hung at exit after reporting its outcome; killed", name)
				_ = cmd.Process.Kill()
				<-exited
				return out.String()
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
