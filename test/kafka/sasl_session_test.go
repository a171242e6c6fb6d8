package kafka_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/rosettamq/rosetta/internal/app"
)

// rawExchange sends one non-flexible request on c and decodes the answer.
func rawExchange(t *testing.T, c net.Conn, corr int32, req kmsg.Request, resp kmsg.Response) error {
	t.Helper()
	if _, err := c.Write(frame(req.Key(), req.GetVersion(), corr, req.AppendTo(nil))); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return err
	}
	resp.SetVersion(req.GetVersion())
	return resp.ReadFrom(body[4:])
}

// TestSASLSessionLifetime (KIP-368): with security.max_reauth set the
// broker tells clients their session lifetime; franz-go re-authenticates
// and keeps producing past it, while a connection that does not
// re-authenticate is closed at its next request.
func TestSASLSessionLifetime(t *testing.T) {
	n := startSecureNode(t, func(c *app.Config) { c.Security.MaxReauth = 1500 * time.Millisecond })
	ctx := ctxTimeout(t, time.Minute)
	cl := n.userClient(t, "admin", kgo.DefaultProduceTopic("reauth"))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "reauth"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("record %d across re-authentications: %v", i, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	c, err := net.Dial("tcp", n.sasl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	hsr := kmsg.NewPtrSASLHandshakeResponse()
	if err := rawExchange(t, c, 1, hs, hsr); err != nil || hsr.ErrorCode != 0 {
		t.Fatalf("handshake: %v %d", err, hsr.ErrorCode)
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("\x00admin\x00admin-secret")
	aur := kmsg.NewPtrSASLAuthenticateResponse()
	if err := rawExchange(t, c, 2, au, aur); err != nil || aur.ErrorCode != 0 {
		t.Fatalf("authenticate: %v %d", err, aur.ErrorCode)
	}
	if aur.SessionLifetimeMillis <= 0 || aur.SessionLifetimeMillis > 1500 {
		t.Fatalf("session lifetime %d ms", aur.SessionLifetimeMillis)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	if err := rawExchange(t, c, 3, md, kmsg.NewPtrMetadataResponse()); err != nil {
		t.Fatalf("metadata within the session: %v", err)
	}
	time.Sleep(time.Duration(aur.SessionLifetimeMillis)*time.Millisecond + 200*time.Millisecond)
	if err := rawExchange(t, c, 4, md, kmsg.NewPtrMetadataResponse()); err == nil {
		t.Fatal("a request after the session expired was answered")
	}
}

// TestOAuthBearerJWT: a JWT signed with the configured key authenticates
// through SASL/OAUTHBEARER as its subject, whose ACLs apply; a forged or
// expired token is refused.
func TestOAuthBearerJWT(t *testing.T) {
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(n.userClient(t, "admin"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "tokens"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:svc-orders").AllowHosts().Topics("tokens").
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	token := func(sub string, exp time.Duration, key string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(exp).Unix()}).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := newClient(t, n.sasl, kgo.SASL(oauth.Auth{Token: token("svc-orders", time.Hour, testJWTSecret)}.AsMechanism()),
		kgo.DefaultProduceTopic("tokens"))
	if err := good.ProduceSync(ctx, &kgo.Record{Value: []byte("via token")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, n.sasl, kgo.SASL(oauth.Auth{Token: token("svc-other", time.Hour, testJWTSecret)}.AsMechanism()),
		kgo.DefaultProduceTopic("tokens"), kgo.RequestRetries(1))
	if err := other.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("token of a principal without ACLs: %v", err)
	}
	for name, tok := range map[string]string{"forged": token("svc-orders", time.Hour, "not-the-key-not-the-key-not-the-key"),
		"expired": token("svc-orders", -time.Hour, testJWTSecret)} {
		cl := newClient(t, n.sasl, kgo.SASL(oauth.Auth{Token: tok}.AsMechanism()), kgo.RequestRetries(0))
		if err := cl.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s token: %v", name, err)
		}
	}
}

// saslPlainConn opens a raw connection and authenticates it with PLAIN;
// it returns the connection and the SaslAuthenticate answer.
func saslPlainConn(t *testing.T, addr, user, pass string) (net.Conn, *kmsg.SASLAuthenticateResponse) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	if err := rawExchange(t, c, 1, hs, kmsg.NewPtrSASLHandshakeResponse()); err != nil {
		t.Fatal(err)
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("\x00"+user+"\x00"+pass)
	aur := kmsg.NewPtrSASLAuthenticateResponse()
	if err := rawExchange(t, c, 2, au, aur); err != nil {
		t.Fatal(err)
	}
	return c, aur
}

// TestConnectionQuota: a user's connection quota refuses its connection
// past the limit at authentication, with a message naming the quota, and
// a closed connection frees its place.
func TestConnectionQuota(t *testing.T) {
	n := startSecureNode(t, nil)
	// The admin API needs a super user's credentials once authorization is on.
	if resp, err := http.Get("http://" + n.HTTPAddr() + "/api/v1/users"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous admin call: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+n.HTTPAddr()+"/api/v1/quotas/user/bob", strings.NewReader(`{"connections": 2}`))
	req.SetBasicAuth("admin", "admin-secret")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("set quota: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	c1, r1 := saslPlainConn(t, n.sasl, "bob", "bob-secret")
	defer c1.Close()
	c2, r2 := saslPlainConn(t, n.sasl, "bob", "bob-secret")
	defer c2.Close()
	c3, r3 := saslPlainConn(t, n.sasl, "bob", "bob-secret")
	defer c3.Close()
	if r1.ErrorCode != 0 || r2.ErrorCode != 0 {
		t.Fatalf("within the quota: %d %d", r1.ErrorCode, r2.ErrorCode)
	}
	if r3.ErrorCode != kerr.SaslAuthenticationFailed.Code || r3.ErrorMessage == nil || !strings.Contains(*r3.ErrorMessage, "connection quota is 2") {
		t.Fatalf("past the quota: %d %v", r3.ErrorCode, r3.ErrorMessage)
	}
	c1.Close()
	eventually(t, 5*time.Second, "a closed connection frees its place", func() bool {
		c, r := saslPlainConn(t, n.sasl, "bob", "bob-secret")
		c.Close()
		return r.ErrorCode == 0
	})
	// Another user is not affected.
	c4, r4 := saslPlainConn(t, n.sasl, "alice", "alice-secret")
	defer c4.Close()
	if r4.ErrorCode != 0 {
		t.Fatalf("alice: %d", r4.ErrorCode)
	}
}
