package tlsmux

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"
)

// ServerConfig builds a server TLS configuration. With a certificate and
// key file, the pair is read again whenever either file changes (checked
// at most every reloadEvery), so a renewed certificate takes effect
// without a restart; a pair that fails to load keeps the previous one.
// Without files, a self-signed certificate is made for this process (what
// RocketMQ's proxy does in its test mode; its clients skip verification by
// default). nextProtos are the ALPN protocols offered ("h2" for gRPC).
func ServerConfig(certFile, keyFile string, nextProtos ...string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	if certFile == "" && keyFile == "" {
		cert, err := selfSigned()
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	r := &reloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg.GetCertificate = r.get
	return cfg, nil
}

const reloadEvery = 2 * time.Second

// reloader serves a certificate pair from files, reloading on change.
type reloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	stamp             string
	checked           time.Time
}

func (r *reloader) stampNow() string {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprint(fi.ModTime().UnixNano(), fi.Size(), ";")
		}
	}
	return s
}

func (r *reloader) load() error {
	stamp := r.stampNow()
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	r.cert, r.stamp = &cert, stamp
	return nil
}

func (r *reloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= reloadEvery {
		r.checked = now
		if r.stampNow() != r.stamp {
			_ = r.load() // a half-written pair keeps the previous one until it loads
		}
	}
	return r.cert, nil
}

// selfSigned makes a P-256 certificate valid for a year.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "rosetta"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Client certificate policies (mutual TLS).
const (
	ClientAuthNone    = "none"
	ClientAuthRequest = "request" // verified when given
	ClientAuthRequire = "require"
)

// WithClientAuth makes cfg ask clients for certificates signed by the CAs
// in caFile: "request" verifies one when given, "require" refuses clients
// without one, "none" (or "") asks for none. The verified certificate's
// subject becomes the connection's principal where a protocol uses it.
func WithClientAuth(cfg *tls.Config, policy, caFile string) error {
	switch policy {
	case "", ClientAuthNone:
		return nil
	case ClientAuthRequest, ClientAuthRequire:
	default:
		return fmt.Errorf("client auth %q: want none, request or require", policy)
	}
	if caFile == "" {
		return fmt.Errorf("client auth %s needs a client CA file", policy)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("client CA %s: no certificate", caFile)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	if policy == ClientAuthRequire {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return nil
}
