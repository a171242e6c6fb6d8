package member

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
)

// TestClusterPKI: members with the same secret derive the same authority
// and certify one another; another secret makes another authority.
func TestClusterPKI(t *testing.T) {
	a, err := makeClusterPKI(t.TempDir(), "east", "s3cret", "127.0.0.11")
	if err != nil {
		t.Fatal(err)
	}
	b, err := makeClusterPKI(t.TempDir(), "east", "s3cret", "127.0.0.12")
	if err != nil {
		t.Fatal(err)
	}
	other, err := makeClusterPKI(t.TempDir(), "east", "another", "127.0.0.13")
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) []byte {
		t.Helper()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(raw)
		return blk.Bytes
	}
	if !bytes.Equal(read(a.caFile), read(b.caFile)) {
		t.Fatal("two members with one secret made different authorities")
	}
	if bytes.Equal(read(a.caFile), read(other.caFile)) {
		t.Fatal("another secret made the same authority")
	}
	verify := func(ca, member *clusterPKI) error {
		caCert, _ := x509.ParseCertificate(read(ca.caFile))
		cert, _ := x509.ParseCertificate(read(member.certFile))
		roots := x509.NewCertPool()
		roots.AddCert(caCert)
		_, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	if err := verify(a, b); err != nil {
		t.Fatalf("a member's certificate does not verify under the shared authority: %v", err)
	}
	if err := verify(a, other); err == nil {
		t.Fatal("a certificate from another secret verifies")
	}
	if fi, err := os.Stat(a.keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
}

// TestEtcdScheme: a member's etcd scheme is recorded at its first start; a
// later start with the other one is refused, as is TLS on a member made
// before schemes were recorded.
func TestEtcdScheme(t *testing.T) {
	dir := t.TempDir()
	if err := checkEtcdScheme(dir, "https"); err != nil {
		t.Fatal(err)
	}
	if err := checkEtcdScheme(dir, "https"); err != nil {
		t.Fatalf("same scheme again: %v", err)
	}
	if err := checkEtcdScheme(dir, "http"); err == nil {
		t.Fatal("a changed scheme was accepted")
	}
	old := t.TempDir()
	if err := os.Mkdir(old+"/member", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkEtcdScheme(old, "https"); err == nil {
		t.Fatal("TLS on an older http member was accepted")
	}
	if err := checkEtcdScheme(old, "http"); err != nil {
		t.Fatalf("an older member staying on http: %v", err)
	}
}
