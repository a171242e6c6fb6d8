package kafka_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// requireTool finds an external client; scripts/test.sh installs them, so in
// CI a missing one is a failure rather than a skip.
func requireTool(t *testing.T, path string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed (scripts/test.sh installs it)", path)
		}
		t.Skipf("%s not installed", path)
	}
	return p
}

func run(t *testing.T, timeout time.Duration, stdin string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// TestKcat drives librdkafka through kcat: metadata, produce with each
// codec, and a group consumer.
func TestKcat(t *testing.T) {
	kcat := requireTool(t, "kcat")
	n := startNode(t)
	b := n.KafkaAddr()
	var lines []string
	for _, codec := range []string{"gzip", "snappy", "lz4"} {
		var in strings.Builder
		for i := 0; i < 100; i++ {
			line := fmt.Sprintf("%s-%03d", codec, i)
			lines = append(lines, line)
			in.WriteString(line + "\n")
		}
		run(t, 30*time.Second, in.String(), kcat, "-b", b, "-P", "-t", "kcat", "-z", codec, "-X", "topic.request.required.acks=-1")
	}
	meta := run(t, 30*time.Second, "", kcat, "-b", b, "-L")
	if !strings.Contains(meta, `topic "kcat" with 8 partitions`) {
		t.Fatalf("kcat -L:\n%s", meta)
	}
	// A balanced group consumer (-G) reading until idle.
	out := run(t, 60*time.Second, "", kcat, "-b", b, "-G", "kcat-group", "-o", "beginning", "-e", "-q", "-f", "%s\n",
		"-X", "session.timeout.ms=6000", "kcat")
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		got[l] = true
	}
	for _, l := range lines {
		if !got[l] {
			t.Fatalf("kcat -G did not return %q (got %d lines)", l, len(got))
		}
	}
	// The group committed its offsets: a second run has nothing new.
	again := run(t, 60*time.Second, "", kcat, "-b", b, "-G", "kcat-group", "-e", "-q", "-f", "%s\n", "-X", "session.timeout.ms=6000", "kcat")
	if strings.TrimSpace(again) != "" {
		t.Fatalf("second group run re-read %d bytes", len(again))
	}
}

func runQuiet(name string, args ...string) error {
	return exec.Command(name, args...).Run()
}
