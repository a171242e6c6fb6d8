package kafka_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

// testCA makes a CA and client certificates it signs.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) client(t *testing.T, subject pkix.Name) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: subject, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestMutualTLSPrincipal: on an SSL listener requiring client
// certificates, a client's verified subject is its principal (Kafka's
// User:CN=…,O=…), ACLs apply to it, and a client without a certificate
// cannot connect.
func TestMutualTLSPrincipal(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	c := apptest.TestConfig(filepath.Join(dir, "data"))
	c.Listen.KafkaListeners = "SSL://127.0.0.1:0"
	c.TLS.ClientAuth, c.TLS.ClientCAFile = "require", caFile
	c.Security.Authorization = true
	c.Security.SuperUsers = "User:CN=ops,O=Example"
	n := apptest.StartTestNode(t, c)
	ctx := ctxTimeout(t, time.Minute)
	dial := func(subject pkix.Name) kgo.Opt {
		return kgo.DialTLSConfig(&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{ca.client(t, subject)}}) //nolint:gosec // test
	}
	ops := newClient(t, n.KafkaAddr(), dial(pkix.Name{CommonName: "ops", Organization: []string{"Example"}}))
	if _, err := kadm.NewClient(ops).CreateTopic(ctx, 1, 1, nil, "mtls"); err != nil {
		t.Fatalf("super user by certificate: %v", err)
	}
	app := newClient(t, n.KafkaAddr(), dial(pkix.Name{CommonName: "app", Organization: []string{"Example"}}),
		kgo.DefaultProduceTopic("mtls"), kgo.RequestRetries(1))
	if err := app.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("certificate without an ACL: %v", err)
	}
	for _, err := range n.App.Security().CreateACLs(ctx, security.User("test"), []security.Binding{{ResourceType: security.ResourceTopic,
		ResourceName: "mtls", PatternType: security.PatternLiteral, Principal: "User:CN=app,O=Example", Host: "*",
		Operation: security.OpWrite, Permission: security.PermissionAllow}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := app.ProduceSync(ctx, &kgo.Record{Value: []byte("y")}).FirstErr(); err != nil {
		t.Fatalf("certificate with an ACL: %v", err)
	}
	none := newClient(t, n.KafkaAddr(), kgo.DialTLSConfig(&tls.Config{InsecureSkipVerify: true}), kgo.RequestRetries(0)) //nolint:gosec // test
	if err := none.Ping(ctx); err == nil {
		t.Fatal("a client without a certificate connected")
	}
}
