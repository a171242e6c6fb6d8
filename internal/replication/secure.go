package replication

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"net"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// Node-to-node security. With a cluster secret, each side of a connection
// proves it knows the secret: the accepting node challenges the dialing one
// and the dialing one the accepting one (so neither a stranger's dial nor
// a stranger's listener joins the traffic). With TLS on as well, the
// connection is TLS 1.3 and each proof covers the session's exported
// keying material, so a man in the middle — who would hold two different
// sessions — cannot relay proofs: the certificates need no authority (each
// node makes its own at start) because the secret authenticates.

// ekmLabel names the keying material the proofs are bound to.
const ekmLabel = "EXPORTER-rosetta-raft-transport"

// selfSignedCert makes a throwaway certificate for the transport's TLS.
func selfSignedCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "rosetta raft transport"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// secureServer wraps an accepted connection in TLS when it is on.
func (t *TCPTransport) secureServer(c net.Conn) (net.Conn, error) {
	if t.tls == nil {
		return c, nil
	}
	tc := tls.Server(c, t.tls)
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}

// secureClient wraps a dialed connection in TLS when it is on.
func (t *TCPTransport) secureClient(c net.Conn) (net.Conn, error) {
	if t.tls == nil {
		return c, nil
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: t.tls.Certificates}) //nolint:gosec // peers authenticate with the cluster secret, bound to the session
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}

// handshakeTimeout bounds TLS handshakes and secret challenges.
const handshakeTimeout = 2 * time.Second

// binding is the TLS session's keying material (nil without TLS).
func binding(c net.Conn) ([]byte, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil
	}
	st := tc.ConnectionState()
	return st.ExportKeyingMaterial(ekmLabel, nil, 32)
}

// prove answers a challenge read from c for node.
func (t *TCPTransport) prove(c net.Conn, node model.NodeID) error {
	nonce := make([]byte, 16)
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.ReadFull(c, nonce); err != nil {
		return fmt.Errorf("cluster secret challenge: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	b, err := binding(c)
	if err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	_, err = c.Write(t.mac(nonce, node, b))
	return err
}

// verify challenges the other end of c to prove it is node.
func (t *TCPTransport) verify(c net.Conn, node model.NodeID) error {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if _, err := c.Write(nonce); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Time{})
	b, err := binding(c)
	if err != nil {
		return err
	}
	if !hmac.Equal(got, t.mac(nonce, node, b)) {
		return fmt.Errorf("peer node %d failed the cluster secret challenge", node)
	}
	return nil
}

// mac is HMAC-SHA256(secret, nonce | node | cluster | session binding).
func (t *TCPTransport) mac(nonce []byte, node model.NodeID, bind []byte) []byte {
	m := hmac.New(sha256.New, []byte(t.cfg.Secret))
	m.Write(nonce)
	_ = binary.Write(m, binary.BigEndian, uint32(node))
	m.Write([]byte(t.cfg.Cluster))
	m.Write(bind)
	return m.Sum(nil)
}
