package apptest

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// StartChild re-runs the test binary with only the test named run (a node
// that runs until it is killed), with env added, and waits for the line it
// prints starting with prefix; it returns the process and the rest of that
// line. Crash tests SIGKILL the process.
func StartChild(t testing.TB, run string, env []string, prefix string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.v=false")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			go func() { // keep draining, so the child never blocks on stdout
				for sc.Scan() {
				}
			}()
			return cmd, rest
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Fatalf("child %s did not report %s", run, prefix)
	return nil, ""
}

// Eventually polls cond until it holds or d passes (then the test fails,
// naming what it waited for).
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
