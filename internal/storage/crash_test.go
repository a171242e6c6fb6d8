package storage_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

const (
	crashChildEnv = "ROSETTA_CRASH_CHILD_DIR"
	crashQueues   = 4
)

func crashConfig(dir string) storage.Config {
	c := storage.DefaultConfig(filepath.Join(dir, "data"))
	c.Durability = storage.DurabilitySync
	c.SegmentSize = 1 << 20 // many segment rolls
	c.MaxRecordSize = 64 << 10
	c.IndexFileEntries = 512
	c.CheckpointInterval = 150 * time.Millisecond
	c.IndexFlushInterval = 20 * time.Millisecond
	c.MinFreeBytes, c.MinFreeRatio = 0, 0
	return c
}

func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// TestCrashChild is the child process of TestCrashRecovery: it appends with
// sync durability from several goroutines and logs every acknowledged record
// until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestCrashRecovery")
	}
	e, err := storage.Open(crashConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	for q := 1; q <= crashQueues; q++ {
		if err := e.CreateQueue(ctx, model.QueueID(q)); err != nil {
			os.Exit(4)
		}
	}
	acks, err := os.OpenFile(filepath.Join(dir, "acks"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		os.Exit(5)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g)))
			for i := 0; ; i++ {
				n := 1 + rng.IntN(3)
				recs := make([]*storage.Record, n)
				q := model.QueueID(1 + rng.IntN(crashQueues))
				for j := range recs {
					p := make([]byte, 16+rng.IntN(9000)) // both staged and directly written payloads
					for k := range p {
						p[k] = byte(rng.Uint32())
					}
					recs[j] = &storage.Record{Queue: q, Count: 1, Payload: p, Keys: []storage.Key{{Key: []byte(fmt.Sprint("k", g, i, j))}}}
				}
				if err := e.Append(ctx, recs); err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(6)
				}
				var sb strings.Builder
				for _, r := range recs {
					fmt.Fprintf(&sb, "%d %d %s\n", r.Queue, r.BaseOffset, hashOf(r.Payload))
				}
				mu.Lock()
				_, _ = acks.WriteString(sb.String())
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
}

type ack struct {
	queue  model.QueueID
	offset model.QueueOffset
	hash   string
}

func readAcks(t *testing.T, path string) []ack {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []ack
	sc := bufio.NewScanner(f)
	sc.Split(wholeLines)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) != 3 {
			continue // a line cut by the kill, continued by the next child
		}
		q, qerr := strconv.Atoi(parts[0])
		o, oerr := strconv.ParseInt(parts[1], 10, 64)
		if qerr != nil || oerr != nil || q <= 0 || q > 64 || len(parts[2]) < 16 {
			continue // a cut line the next child's first line continued
		}
		out = append(out, ack{model.QueueID(q), model.QueueOffset(o), parts[2]})
	}
	return out
}

// wholeLines splits lines ended by a newline only: the kill can cut the
// child's last write anywhere (a write is cut between pages), and a cut
// line was never fully acknowledged.
func wholeLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF {
		return len(data), nil, nil // the cut last line: dropped
	}
	return 0, nil, nil
}

// TestCrashRecovery SIGKILLs a child appending with sync durability at random
// moments and checks after every restart that each acknowledged record reads
// back byte-identical at its offset, that offsets are dense and that no record
// fails its checksum.
func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child")
	}
	kills := 22
	if testing.Short() {
		kills = 5
	}
	dir := t.TempDir()
	killChildRepeatedly(t, "TestCrashChild", crashChildEnv, dir, kills, 100*time.Millisecond, 400*time.Millisecond,
		func(round int) { verifyCrashDir(t, dir, round) })
}

// killChildRepeatedly runs the test child in this binary with env=dir,
// SIGKILLs it after a random time in [least, least+spread), checks that it
// was the kill that ended it, and calls verify; kills times.
func killChildRepeatedly(t *testing.T, child, env, dir string, kills int, least, spread time.Duration, verify func(round int)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(child))))
	for round := 0; round < kills; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.v=false")
		cmd.Env = append(os.Environ(), env+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(least + time.Duration(rng.Int64N(int64(spread))))
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child ended on its own (%v): %s", round, err, stderr.String())
		}
		verify(round)
	}
}

func verifyCrashDir(t *testing.T, dir string, round int) {
	t.Helper()
	acks := readAcks(t, filepath.Join(dir, "acks"))
	e, err := storage.Open(crashConfig(dir))
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer e.Close()
	stored := map[model.QueueID][]string{}
	for q := model.QueueID(1); q <= crashQueues; q++ {
		off := model.QueueOffset(0)
		for {
			res, err := e.Read(q, off, storage.ReadOptions{MaxBytes: 256 << 10})
			if errors.Is(err, model.ErrUnknownQueue) && off == 0 {
				// Killed before the child created its queues (a slow start
				// on a loaded machine): nothing of this queue was
				// acknowledged, which the check below confirms.
				break
			}
			if err != nil {
				t.Fatalf("round %d: queue %d offset %d: %v", round, q, off, err)
			}
			for _, r := range res.Records {
				if r.BaseOffset != off {
					t.Fatalf("round %d: queue %d: offset %d where %d was expected (gap)", round, q, r.BaseOffset, off)
				}
				stored[q] = append(stored[q], hashOf(r.Payload))
				off++
			}
			n := len(res.Records)
			res.Release()
			if n == 0 {
				break
			}
		}
	}
	for _, a := range acks {
		s := stored[a.queue]
		if int(a.offset) >= len(s) {
			t.Fatalf("round %d: acknowledged queue %d offset %d lost (queue has %d)", round, a.queue, a.offset, len(s))
		}
		if s[a.offset] != a.hash {
			t.Fatalf("round %d: queue %d offset %d differs from what was acknowledged", round, a.queue, a.offset)
		}
	}
	total := 0
	for _, s := range stored {
		total += len(s)
	}
	t.Logf("round %d: %d acknowledged, %d stored, all intact", round, len(acks), total)
}
