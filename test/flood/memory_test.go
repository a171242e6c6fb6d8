package flood

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/bench"
	"github.com/rosettamq/rosetta/internal/memory"
)

const floodDirEnv = "ROSETTA_FLOOD_NODE_DIR"

// TestFloodNodeChild runs a node for TestFloodMemoryComesBack as
// rosetta serve runs one (its collector target and automatic memory
// limit), until it is killed.
func TestFloodNodeChild(t *testing.T) {
	dir := os.Getenv(floodDirEnv)
	if dir == "" {
		t.Skip("run by TestFloodMemoryComesBack")
	}
	cfg := apptest.TestConfig(dir)
	debug.SetGCPercent(cfg.GCTarget())
	go memory.TrackLimit(context.Background(), slog.New(slog.DiscardHandler))
	n := apptest.StartTestNode(t, cfg)
	fmt.Printf("ADDRS=%s %s %s %s\n", n.KafkaAddr(), n.RemotingAddr(), n.GRPCAddr(), n.HTTPAddr())
	select {} // until killed
}

// TestFloodMemoryComesBack: the flood rosetta-bench flood makes — 5,000
// idle connections, 200 trickling requests, 200 announcing 64 MiB frames,
// 2,000 remoting frames with 200 KB of ext fields and 500 garbage
// connections per listener — held a few seconds, then closed: 30 s later
// the node's resident memory is at most twice what it was before it plus
// 64 MiB (what the connections held is given back, and so is the heap the
// flood grew), while a real producer went on being answered.
func TestFloodMemoryComesBack(t *testing.T) {
	if raceDetector {
		t.Skip("memory is not measured under the race detector")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	const fds = 10000 // the flood's connections, and the node's ends of them in its own process
	if lim.Cur < fds {
		want := syscall.Rlimit{Cur: fds, Max: max(lim.Max, fds)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			t.Skipf("cannot raise the open file limit to %d: %v", fds, err)
		}
	}
	cmd, line := apptest.StartChild(t, "TestFloodNodeChild", []string{floodDirEnv + "=" + t.TempDir()}, "ADDRS=")
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	a := strings.Fields(line)
	time.Sleep(2 * time.Second) // settled after its start
	var out strings.Builder
	res, err := bench.Flood(context.Background(), bench.FloodOptions{Kafka: a[0], Remoting: a[1], GRPC: a[2], HTTP: a[3],
		BrokerPID: cmd.Process.Pid, Idle: 5000, Slow: 200, Huge: 200, ExtFrames: 2000, Malformed: 500,
		Hold: 5 * time.Second, After: 30 * time.Second}, &out)
	t.Log(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	if bound := 2*res.Start + 64<<20; res.After > bound {
		t.Fatalf("RSS %d MiB 30 s after the flood closed, bound %d MiB (before it %d MiB)", res.After>>20, bound>>20, res.Start>>20)
	}
}
