package apptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/storage/tier/s3bucket"
)

// VersityGW is a real S3 server (versitygw, posix backend) run as a child
// process on loopback, with signature checks on: the object store of
// process-level tiering tests, which stop, kill and restart it.
type VersityGW struct {
	t        testing.TB
	bin      string
	root     string
	iam      string
	Addr     string
	Endpoint string
	cmd      *exec.Cmd
}

// Test credentials of the server's root account.
const (
	VersityAccessKey = "rosetta-test"
	VersitySecretKey = "rosetta-test-secret"
)

// StartVersityGW starts versitygw from $ROSETTA_VERSITYGW (scripts/test.sh
// builds it; the test is skipped without it) and creates bucket in it. It
// is killed when the test ends.
func StartVersityGW(t testing.TB, bucket string) *VersityGW {
	t.Helper()
	bin := os.Getenv("ROSETTA_VERSITYGW")
	if bin == "" {
		t.Skip("ROSETTA_VERSITYGW names no versitygw binary (scripts/test.sh builds one)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	g := &VersityGW{t: t, bin: bin, root: dir + "/data", iam: dir + "/iam", Addr: addr, Endpoint: "http://" + addr}
	for _, d := range []string{g.root, g.iam} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	g.Start()
	t.Cleanup(g.Kill)
	b := g.Bucket(bucket, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := b.CreateBucket(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create bucket %s in versitygw: %v", bucket, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return g
}

// Start starts the server (again) on its address and data directory.
func (g *VersityGW) Start() {
	g.t.Helper()
	cmd := exec.Command(g.bin, "--port", g.Addr, "--iam-dir", g.iam, "--quiet", "posix", g.root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+VersityAccessKey, "ROOT_SECRET_KEY="+VersitySecretKey)
	if os.Getenv("ROSETTA_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.cmd = cmd
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", g.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("versitygw did not listen on %s: %v", g.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill SIGKILLs the server and waits for it to exit.
func (g *VersityGW) Kill() {
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGCONT)
	_ = g.cmd.Process.Kill()
	_ = g.cmd.Wait()
	g.cmd = nil
}

// Pause SIGSTOPs the server: connections are accepted by the kernel and
// requests hang, as behind a black hole.
func (g *VersityGW) Pause() { g.signal(syscall.SIGSTOP) }

// Resume SIGCONTs a paused server.
func (g *VersityGW) Resume() { g.signal(syscall.SIGCONT) }

func (g *VersityGW) signal(s syscall.Signal) {
	g.t.Helper()
	if g.cmd == nil {
		g.t.Fatal("versitygw is not running")
	}
	if err := g.cmd.Process.Signal(s); err != nil && !errors.Is(err, os.ErrProcessDone) {
		g.t.Fatal(err)
	}
}

// Bucket is a client of bucket in the server with the key prefix.
func (g *VersityGW) Bucket(bucket, prefix string) *s3bucket.Bucket {
	g.t.Helper()
	b, err := s3bucket.New(context.Background(), s3bucket.Config{Endpoint: g.Endpoint, Bucket: bucket, Prefix: prefix,
		AccessKey: VersityAccessKey, SecretKey: VersitySecretKey, PathStyle: true, Timeout: 5 * time.Second})
	if err != nil {
		g.t.Fatal(err)
	}
	return b
}

// Configure points c's tiered storage at bucket in the server, with the
// settings of WithTestBucket and requests that give up after timeout.
func (g *VersityGW) Configure(c *app.Config, bucket string, timeout time.Duration) {
	tierTestSettings(c, g.Endpoint, bucket, VersityAccessKey, VersitySecretKey)
	c.Storage.Tier.RequestTimeout = timeout
}

// String names the server for messages.
func (g *VersityGW) String() string { return fmt.Sprintf("versitygw at %s", g.Addr) }
