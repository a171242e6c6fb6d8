package mqtt_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

// TestAuthenticationAndTLS: with authentication required and ACLs on, a
// client without credentials or with a wrong password is refused; a
// user's password authenticates; an unauthorised subscription gets the
// failure return code and an unauthorised publish is dropped; the TLS-only
// listener and the plaintext port (TLS there too) serve ssl:// clients.
func TestAuthenticationAndTLS(t *testing.T) {
	t.Parallel()
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Security.Authorization = true
	cfg.Security.MQTTAuthentication = true
	cfg.Security.FailureDelay = time.Millisecond
	n := apptest.StartTestNode(t, cfg)
	sec := n.App.Security()
	ctx := context.Background()
	for u, pw := range map[string]string{"alice": "alice-pw", "bob": "bob-pw"} {
		if err := sec.SetPassword(ctx, security.User("test"), u, pw, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range sec.CreateACLs(ctx, security.User("test"), []security.Binding{
		{ResourceType: security.ResourceTopic, ResourceName: "plant", PatternType: security.PatternLiteral,
			Principal: "User:bob", Host: "*", Operation: security.OpWrite, Permission: security.PermissionAllow},
		{ResourceType: security.ResourceTopic, ResourceName: "plant", PatternType: security.PatternLiteral,
			Principal: "User:alice", Host: "*", Operation: security.OpRead, Permission: security.PermissionAllow},
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	try := func(url, id, user, pw string) (paho.Client, error) {
		opts := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
			SetTLSConfig(&tls.Config{InsecureSkipVerify: true})
		if user != "" {
			opts.SetUsername(user).SetPassword(pw)
		}
		c := paho.NewClient(opts)
		tok := c.Connect()
		tok.WaitTimeout(10 * time.Second)
		if tok.Error() == nil {
			t.Cleanup(func() { c.Disconnect(100) })
		}
		return c, tok.Error()
	}
	if _, err := try(n.MQTTURL(), "anon", "", ""); err == nil {
		t.Fatal("a client without credentials connected")
	}
	if _, err := try(n.MQTTURL(), "wrong", "alice", "nope"); err == nil {
		t.Fatal("a wrong password connected")
	}
	alice, err := try("ssl://"+n.App.Addr("mqtt-ssl"), "alice", "alice", "alice-pw")
	if err != nil {
		t.Fatalf("alice over TLS: %v", err)
	}
	bob, err := try("ssl://"+n.App.Addr("mqtt"), "bob", "bob", "bob-pw") // TLS on the plaintext port
	if err != nil {
		t.Fatalf("bob over TLS on the permissive port: %v", err)
	}
	var in inbox
	tok := alice.Subscribe("plant/#", 1, in.handler)
	wait(t, tok, "alice subscribes")
	if codes := tok.(*paho.SubscribeToken).Result(); codes["plant/#"] != 1 {
		t.Fatalf("alice's subscription: %v", codes)
	}
	tok = bob.Subscribe("plant/#", 1, nil)
	wait(t, tok, "bob subscribes")
	if codes := tok.(*paho.SubscribeToken).Result(); codes["plant/#"] != 0x80 {
		t.Fatalf("bob's unauthorised subscription: %v", codes)
	}
	wait(t, alice.Publish("plant/line1", 1, false, "from alice"), "alice publishes") // acknowledged, dropped
	wait(t, bob.Publish("plant/line1", 1, false, "from bob"), "bob publishes")
	got := in.waitFor(t, 1)
	time.Sleep(200 * time.Millisecond)
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.msgs) != 1 || string(got[0].Payload()) != "from bob" {
		t.Fatalf("alice got %d messages, first %q", len(in.msgs), got[0].Payload())
	}
}
