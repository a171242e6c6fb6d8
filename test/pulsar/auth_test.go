package pulsar_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/golang-jwt/jwt/v5"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

const authJWTSecret = "0123456789abcdef0123456789abcdef-pulsar"

// TestAuthenticationAndTLS: with authentication required and ACLs on, a
// client without credentials or with a wrong password is refused; a
// token (a JWT the node accepts) and a user's password authenticate; an
// ACL decides who produces and who consumes; the TLS listener serves
// pulsar+ssl:// clients.
func TestAuthenticationAndTLS(t *testing.T) {
	t.Parallel()
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Security.Authorization = true
	cfg.Security.PulsarAuthentication = true
	cfg.Security.SuperUsers = "User:admin"
	cfg.Security.JWTHMACSecret = authJWTSecret
	cfg.Security.FailureDelay = time.Millisecond
	n := apptest.StartTestNode(t, cfg)
	sec := n.App.Security()
	ctx := context.Background()
	for u, pw := range map[string]string{"admin": "admin-pw", "alice": "alice-pw"} {
		if err := sec.SetPassword(ctx, security.User("test"), u, pw, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range sec.CreateACLs(ctx, security.User("test"), []security.Binding{
		{ResourceType: security.ResourceTopic, ResourceName: "secured", PatternType: security.PatternLiteral,
			Principal: "User:svc-writer", Host: "*", Operation: security.OpWrite, Permission: security.PermissionAllow},
		{ResourceType: security.ResourceTopic, ResourceName: "secured", PatternType: security.PatternLiteral,
			Principal: "User:alice", Host: "*", Operation: security.OpRead, Permission: security.PermissionAllow},
		{ResourceType: security.ResourceGroup, ResourceName: "readers", PatternType: security.PatternLiteral,
			Principal: "User:alice", Host: "*", Operation: security.OpRead, Permission: security.PermissionAllow},
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "svc-writer", "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString([]byte(authJWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	connect := func(url string, auth pulsar.Authentication) pulsar.Client {
		c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, Authentication: auth, OperationTimeout: 3 * time.Second,
			ConnectionTimeout: 3 * time.Second, TLSAllowInsecureConnection: true, Logger: plog.NewLoggerWithSlog(slog.New(slog.DiscardHandler))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	basic := func(user, pw string) pulsar.Authentication {
		a, err := pulsar.NewAuthenticationBasic(user, pw)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if _, err := connect(n.PulsarURL(), nil).CreateProducer(pulsar.ProducerOptions{Topic: "secured"}); err == nil {
		t.Fatal("a client without credentials made a producer")
	}
	if _, err := connect(n.PulsarURL(), basic("alice", "wrong")).CreateProducer(pulsar.ProducerOptions{Topic: "secured"}); err == nil {
		t.Fatal("a wrong password made a producer")
	}
	// alice may read, not write.
	alice := connect(n.PulsarURL(), basic("alice", "alice-pw"))
	if _, err := alice.CreateProducer(pulsar.ProducerOptions{Topic: "secured"}); err == nil || !strings.Contains(err.Error(), "Authorization") {
		t.Fatalf("alice made a producer: %v", err)
	}
	if _, err := alice.Subscribe(pulsar.ConsumerOptions{Topic: "secured", SubscriptionName: "others"}); err == nil {
		t.Fatal("alice subscribed with a subscription she may not use")
	}
	co, err := alice.Subscribe(pulsar.ConsumerOptions{Topic: "secured", SubscriptionName: "readers"})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	// The token's service writes, over TLS.
	writer := connect(n.PulsarSSLURL(), pulsar.NewAuthenticationToken(token))
	p, err := writer.CreateProducer(pulsar.ProducerOptions{Topic: "secured"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("over tls")}); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, co, 10*time.Second); string(m.Payload()) != "over tls" {
		t.Fatalf("alice read %q", m.Payload())
	}
}
