package tlsmux

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// echo serves l: each connection answers its first line back.
func echo(t *testing.T, l net.Listener) {
	t.Helper()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					_, _ = c.Write([]byte(line))
				}
			}()
		}
	}()
}

func roundTrip(c net.Conn) (string, error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func listen(t *testing.T, mode Mode, cfg *tls.Config) net.Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(inner, cfg, mode, nil)
	t.Cleanup(func() { l.Close() })
	echo(t, l)
	return l
}

func TestPermissiveServesBoth(t *testing.T) {
	cfg, err := ServerConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, Permissive, cfg)
	plain, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(plain); err != nil || got != "hello\n" {
		t.Fatalf("plaintext: %q %v", got, err)
	}
	tc, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(tc); err != nil || got != "hello\n" {
		t.Fatalf("tls: %q %v", got, err)
	}
}

func TestEnforcingRefusesPlaintext(t *testing.T) {
	cfg, err := ServerConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, Enforcing, cfg)
	plain, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(plain); err == nil {
		t.Fatalf("plaintext answered %q", got)
	}
	tc, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(tc); err != nil || got != "hello\n" {
		t.Fatalf("tls: %q %v", got, err)
	}
}

// TestCertificateReload: a certificate pair rewritten on disk is served to
// the next handshake without a restart.
func TestCertificateReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write := func() []byte {
		cert, err := selfSigned()
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM := encodePEM(t, cert)
		if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		return cert.Certificate[0]
	}
	first := write()
	cfg, err := ServerConfig(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, Permissive, cfg)
	served := func() []byte {
		tc, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Raw
	}
	if string(served()) != string(first) {
		t.Fatal("first certificate not served")
	}
	second := write()
	deadline := time.Now().Add(3 * reloadEvery)
	for string(served()) != string(second) {
		if time.Now().After(deadline) {
			t.Fatal("renewed certificate not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Permissive, "disabled": Disabled, "enforcing": Enforcing} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseMode("strict"); err == nil {
		t.Error("strict accepted")
	}
}

// TestPlaintextConnUnwrapped: a plaintext connection comes out as the
// listener's own *net.TCPConn (its writev fast path intact), with its
// first byte still to be read.
func TestPlaintextConnUnwrapped(t *testing.T) {
	cfg, err := ServerConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(inner, cfg, Permissive, nil)
	defer l.Close()
	cl, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, _ = cl.Write([]byte("xyz"))
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("plaintext connection is a %T", c)
	}
	b := make([]byte, 3)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "xyz" {
		t.Fatalf("read %q %v", b, err)
	}
}
