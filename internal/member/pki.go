package member

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// clusterPKI is what the members' embedded etcd authenticates one another
// and its clients with when cluster.tls is on: a certificate authority
// every member derives from the cluster secret (the same key and the same
// certificate on each: Ed25519 signs deterministically), and this member's
// certificate signed by it. Holding the secret is holding the authority,
// as for the replication connections; nothing has to be distributed.
type clusterPKI struct {
	caFile, certFile, keyFile string
	client                    *tls.Config // for this node's etcd client
}

// makeClusterPKI writes the cluster's authority and a fresh certificate for
// host into dir.
func makeClusterPKI(dir, cluster, secret, host string) (*clusterPKI, error) {
	seed, err := hkdf.Key(sha256.New, []byte(secret), []byte(cluster), "rosetta cluster etcd authority", ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rosetta cluster " + cluster},
		NotBefore: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2120, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("cluster authority: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
		if ip.IsLoopback() {
			// Members on one machine: etcd checks a peer's certificate
			// against the address it connects from, 127.0.0.1.
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
		}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("member certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &clusterPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "member.pem"), keyFile: filepath.Join(dir, "member-key.pem")}
	for _, f := range []struct {
		path, kind string
		der        []byte
		mode       os.FileMode
	}{{p.caFile, "CERTIFICATE", caDER, 0o644}, {p.certFile, "CERTIFICATE", der, 0o644}, {p.keyFile, "PRIVATE KEY", keyDER, 0o600}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), f.mode); err != nil {
			return nil, fmt.Errorf("cluster certificates: %w", err)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	p.client = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	return p, nil
}

// ca, cert and key are the files' paths ("" without certificates).
func (p *clusterPKI) ca() string {
	if p == nil {
		return ""
	}
	return p.caFile
}

func (p *clusterPKI) cert() string {
	if p == nil {
		return ""
	}
	return p.certFile
}

func (p *clusterPKI) key() string {
	if p == nil {
		return ""
	}
	return p.keyFile
}

// checkEtcdScheme refuses to start an embedded etcd member whose data was
// made with the other scheme (cluster.tls changed after the cluster was
// made: the members keep one another's peer URLs, so they would not find
// one another), and records the scheme of a new member.
func checkEtcdScheme(dir, scheme string) error {
	path := filepath.Join(dir, "rosetta-url-scheme")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if had := string(b); had != scheme {
			return fmt.Errorf("%w: cluster.tls changed after the cluster was made (its etcd members use %s, this start %s): "+
				"set it back, or make the cluster anew", model.ErrInvalidConfig, had, scheme)
		}
		return nil
	case !os.IsNotExist(err):
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "member")); err == nil && scheme != "http" {
		// A member made before the scheme was recorded used http.
		return fmt.Errorf("%w: cluster.tls turned on for a cluster made without it: its etcd members use http; make the cluster anew",
			model.ErrInvalidConfig)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(scheme), 0o644)
}
