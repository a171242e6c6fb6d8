package security

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/rosettamq/rosetta/internal/meta"
)

const testSecret = "0123456789abcdef0123456789abcdef-unit"

func newTestService(t testing.TB, opts Options) *Service {
	t.Helper()
	dir := t.TempDir()
	store, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if opts.KeyFile == "" {
		opts.KeyFile = filepath.Join(dir, "security.key")
	}
	opts.JWT.HMACSecret = []byte(testSecret)
	s, err := New(context.Background(), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var tester = User("test")

func allow(p string, rt ResourceType, name string, pt PatternType, op Operation) Binding {
	return Binding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: p, Host: "*", Operation: op, Permission: PermissionAllow}
}

func TestAuthorizeRules(t *testing.T) {
	s := newTestService(t, Options{Authorization: true, SuperUsers: []string{"User:root"}})
	deny := allow("User:alice", ResourceTopic, "orders-secret", PatternLiteral, OpRead)
	deny.Permission = PermissionDeny
	for _, err := range s.CreateACLs(context.Background(), tester, []Binding{
		allow("User:alice", ResourceTopic, "orders", PatternPrefixed, OpRead),
		allow("User:*", ResourceTopic, "public-", PatternPrefixed, OpWrite),
		allow("User:bob", ResourceNamespace, "acme/prod", PatternLiteral, OpAll),
		allow("User:carol", ResourceTopic, "*", PatternLiteral, OpAlterConfigs),
		deny,
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		p    string
		rt   ResourceType
		name string
		op   Operation
		want bool
	}{
		{"alice", ResourceTopic, "orders", OpRead, true},
		{"alice", ResourceTopic, "orders-eu", OpRead, true},
		{"alice", ResourceTopic, "orders", OpDescribe, true}, // implied by Read
		{"alice", ResourceTopic, "orders", OpWrite, false},
		{"alice", ResourceTopic, "orders-secret", OpRead, false},    // deny wins
		{"alice", ResourceTopic, "orders-secret", OpDescribe, true}, // a Read deny does not deny Describe
		{"alice", ResourceTopic, "public-x", OpWrite, true},         // User:*
		{"bob", ResourceTopic, "acme/prod/x", OpWrite, true},        // namespace ACL
		{"bob", ResourceTopic, "acme/dev/x", OpWrite, false},
		{"bob", ResourceTopic, "x", OpWrite, false},
		{"carol", ResourceTopic, "anything", OpDescribeConfigs, true}, // implied by AlterConfigs
		{"carol", ResourceTopic, "anything", OpRead, false},
		{"root", ResourceCluster, ClusterResourceName, OpAlter, true},
		{"nobody", ResourceTopic, "orders", OpRead, false},
	} {
		for range 2 { // second time from the cache
			if got := s.Authorize(User(c.p), "127.0.0.1", c.rt, c.name, c.op); got != c.want {
				t.Errorf("%s %v %s %v: got %v", c.p, c.rt, c.name, c.op, got)
			}
		}
	}
	if !s.AuthorizeAny(User("bob"), "h", ResourceTopic, OpWrite) || s.AuthorizeAny(User("nobody"), "h", ResourceTopic, OpRead) || !s.AuthorizeAny(User("nobody"), "h", ResourceTopic, OpWrite) {
		t.Error("AuthorizeAny")
	}
	// Changes invalidate cached decisions.
	if _, err := s.DeleteACLs(context.Background(), tester, []Filter{{Principal: "User:alice", Permission: PermissionDeny}}); err != nil {
		t.Fatal(err)
	}
	if !s.Authorize(User("alice"), "h", ResourceTopic, "orders-secret", OpRead) {
		t.Error("deleted deny still applies")
	}
}

func TestAllowIfNoACLAndHosts(t *testing.T) {
	s := newTestService(t, Options{Authorization: true, AllowIfNoACL: true})
	b := allow("User:alice", ResourceTopic, "t", PatternLiteral, OpRead)
	b.Host = "10.0.0.1"
	s.CreateACLs(context.Background(), tester, []Binding{b})
	r := allow("User:bob", ResourceTopic, "t", PatternLiteral, OpRead)
	r.Host = "10.1.0.0/16"
	if errs := s.CreateACLs(context.Background(), tester, []Binding{r}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	bad := r
	bad.Host = "10.1.0.0/99"
	if errs := s.CreateACLs(context.Background(), tester, []Binding{bad}); !errors.Is(errs[0], ErrInvalid) {
		t.Fatalf("bad range: %v", errs[0])
	}
	switch {
	case !s.Authorize(User("bob"), "10.1.2.3", ResourceTopic, "t", OpRead):
		t.Error("address in the range refused")
	case s.Authorize(User("bob"), "10.2.0.1", ResourceTopic, "t", OpRead):
		t.Error("address outside the range allowed")
	case !s.Authorize(User("x"), "h", ResourceTopic, "unnamed", OpWrite):
		t.Error("no ACL on the resource: allowed")
	case s.Authorize(User("alice"), "10.0.0.2", ResourceTopic, "t", OpRead):
		t.Error("wrong host allowed")
	case !s.Authorize(User("alice"), "10.0.0.1", ResourceTopic, "t", OpRead):
		t.Error("right host refused")
	}
}

func TestACLValidationAndFilters(t *testing.T) {
	s := newTestService(t, Options{})
	bad := []Binding{
		{ResourceType: ResourceTopic, ResourceName: "t", PatternType: PatternMatch, Principal: "User:a", Host: "*", Operation: OpRead, Permission: PermissionAllow},
		{ResourceType: ResourceTopic, ResourceName: "t", PatternType: PatternLiteral, Principal: "alice", Host: "*", Operation: OpRead, Permission: PermissionAllow},
		{ResourceType: ResourceCluster, ResourceName: "x", PatternType: PatternLiteral, Principal: "User:a", Host: "*", Operation: OpAlter, Permission: PermissionAllow},
		{ResourceType: ResourceTopic, ResourceName: "t", PatternType: PatternLiteral, Principal: "User:a", Host: "*", Operation: OpAny, Permission: PermissionAllow},
	}
	for i, err := range s.CreateACLs(context.Background(), tester, bad) {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("binding %d: %v", i, err)
		}
	}
	good := allow("User:a", ResourceTopic, "orders", PatternPrefixed, OpRead)
	s.CreateACLs(context.Background(), tester, []Binding{good, good})
	if got := s.DescribeACLs(Filter{}); len(got) != 1 {
		t.Fatalf("a binding made twice is one: %v", got)
	}
	if got := s.DescribeACLs(Filter{ResourceType: ResourceTopic, ResourceName: "orders-1", PatternType: PatternMatch}); len(got) != 1 {
		t.Fatalf("match filter: %v", got)
	}
	if got := s.DescribeACLs(Filter{ResourceName: "orders-1", PatternType: PatternLiteral}); len(got) != 0 {
		t.Fatalf("literal filter: %v", got)
	}
}

// scramLogin runs franz-go's SCRAM client against the server exchange.
func scramLogin(t *testing.T, s *Service, mech, user, pass string) (Principal, error) {
	t.Helper()
	a := scram.Auth{User: user, Pass: pass}
	m := a.AsSha256Mechanism()
	if mech == MechSCRAMSHA512 {
		m = a.AsSha512Mechanism()
	}
	sess, msg, err := m.Authenticate(context.Background(), "broker")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := s.NewSASL(mech)
	if err != nil {
		t.Fatal(err)
	}
	for {
		out, done, err := ex.Step(msg)
		if err != nil {
			return Principal{}, err
		}
		cdone, next, cerr := sess.Challenge(out)
		if cerr != nil {
			return Principal{}, cerr
		}
		if done {
			if !cdone {
				t.Fatal("server done before the client")
			}
			return ex.Principal(), nil
		}
		msg = next
	}
}

func TestSCRAMAndPlain(t *testing.T) {
	s := newTestService(t, Options{})
	ctx := context.Background()
	if err := s.SetPassword(ctx, tester, "alice", "s3cret,=pw", 0); err != nil {
		t.Fatal(err)
	}
	for _, mech := range SCRAMMechanisms {
		if p, err := scramLogin(t, s, mech, "alice", "s3cret,=pw"); err != nil || p != User("alice") {
			t.Fatalf("%s: %v %v", mech, p, err)
		}
		if _, err := scramLogin(t, s, mech, "alice", "wrong"); !errors.Is(err, ErrAuthentication) {
			t.Fatalf("%s wrong password: %v", mech, err)
		}
		if _, err := scramLogin(t, s, mech, "mallory", "s3cret,=pw"); !errors.Is(err, ErrAuthentication) {
			t.Fatalf("%s unknown user: %v", mech, err)
		}
	}
	ex, _ := s.NewSASL(MechPlain)
	if _, done, err := ex.Step([]byte("\x00alice\x00s3cret,=pw")); err != nil || !done || ex.Principal() != User("alice") {
		t.Fatalf("PLAIN: %v", err)
	}
	for _, bad := range []string{"\x00alice\x00nope", "bob\x00alice\x00s3cret,=pw", "alice", "\x00\x00"} {
		ex, _ := s.NewSASL(MechPlain)
		if _, _, err := ex.Step([]byte(bad)); !errors.Is(err, ErrAuthentication) {
			t.Fatalf("PLAIN %q: %v", bad, err)
		}
	}
	// Secrets at rest: the stored record holds no password.
	kv, err := s.meta.Get(ctx, userKey("alice"))
	if err != nil || containsBytes(kv.Value, "s3cret") {
		t.Fatalf("stored user record leaks the password: %s %v", kv.Value, err)
	}
	if sec, ok := s.SigningSecret("alice"); !ok || string(sec) != "s3cret,=pw" {
		t.Fatalf("signing secret: %q %v", sec, ok)
	}
}

func containsBytes(b []byte, s string) bool {
	return len(s) > 0 && len(b) >= len(s) && string(b) != "" && indexOf(b, s) >= 0
}

func indexOf(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}

func TestSCRAMUpsertFromSaltedPassword(t *testing.T) {
	s := newTestService(t, Options{})
	h, _ := scramHash(MechSCRAMSHA256)
	salt := []byte("0123456789")
	salted, _ := saltPassword(h, "pw", salt, 4096)
	if err := s.UpsertSCRAM(context.Background(), tester, "carol", MechSCRAMSHA256, 4096, salt, salted); err != nil {
		t.Fatal(err)
	}
	if _, err := scramLogin(t, s, MechSCRAMSHA256, "carol", "pw"); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertSCRAM(context.Background(), tester, "carol", MechSCRAMSHA256, 100, salt, salted); !errors.Is(err, ErrInvalid) {
		t.Fatalf("too few iterations: %v", err)
	}
	if err := s.DeleteSCRAM(context.Background(), tester, "carol", MechSCRAMSHA512); !errors.Is(err, ErrNoUser) {
		t.Fatalf("deleting a missing credential: %v", err)
	}
	if err := s.DeleteSCRAM(context.Background(), tester, "carol", MechSCRAMSHA256); err != nil || len(s.Users("carol")) != 0 {
		t.Fatalf("delete the last credential removes the user: %v %v", err, s.Users("carol"))
	}
}

func TestOAuthBearer(t *testing.T) {
	s := newTestService(t, Options{})
	sign := func(claims jwt.MapClaims, key any, method jwt.SigningMethod) string {
		tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := sign(jwt.MapClaims{"sub": "dave", "exp": time.Now().Add(time.Hour).Unix()}, []byte(testSecret), jwt.SigningMethodHS256)
	login := func(token string) (Principal, error) {
		_, msg, err := oauth.Auth{Token: token}.AsMechanism().Authenticate(context.Background(), "broker")
		if err != nil {
			t.Fatal(err)
		}
		ex, err := s.NewSASL(MechOAuthBearer)
		if err != nil {
			t.Fatal(err)
		}
		_, done, err := ex.Step(msg)
		if err == nil && !done {
			t.Fatal("not done")
		}
		return ex.Principal(), err
	}
	if p, err := login(good); err != nil || p != User("dave") {
		t.Fatalf("good token: %v %v", p, err)
	}
	disabled := true
	s.SetPassword(context.Background(), tester, "dave", "pw", 0)
	s.SetUserFlags(context.Background(), tester, "dave", nil, &disabled)
	if _, err := login(good); !errors.Is(err, ErrAuthentication) {
		t.Fatalf("token of a disabled user: %v", err)
	}
	for name, tok := range map[string]string{
		"expired":     sign(jwt.MapClaims{"sub": "dave", "exp": time.Now().Add(-time.Hour).Unix()}, []byte(testSecret), jwt.SigningMethodHS256),
		"no expiry":   sign(jwt.MapClaims{"sub": "dave"}, []byte(testSecret), jwt.SigningMethodHS256),
		"wrong key":   sign(jwt.MapClaims{"sub": "dave", "exp": time.Now().Add(time.Hour).Unix()}, []byte("another-key-another-key-another-key"), jwt.SigningMethodHS256),
		"no subject":  sign(jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()}, []byte(testSecret), jwt.SigningMethodHS256),
		"alg none":    sign(jwt.MapClaims{"sub": "dave", "exp": time.Now().Add(time.Hour).Unix()}, jwt.UnsafeAllowNoneSignatureType, jwt.SigningMethodNone),
		"not a token": "garbage",
	} {
		if _, err := login(tok); !errors.Is(err, ErrAuthentication) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestGuard(t *testing.T) {
	g := NewGuard(2, 10*time.Millisecond, 80*time.Millisecond)
	if d := g.Failed("a"); d != 10*time.Millisecond {
		t.Fatal(d)
	}
	g.Failed("a")
	g.Failed("a")
	if d := g.Failed("a"); d != 80*time.Millisecond {
		t.Fatalf("capped: %v", d)
	}
	if d := g.Failed("b"); d != 10*time.Millisecond {
		t.Fatalf("per source: %v", d)
	}
	g.Succeeded("a")
	if d := g.Failed("a"); d != 10*time.Millisecond {
		t.Fatalf("reset: %v", d)
	}
	if !g.Admit() || !g.Admit() || g.Admit() {
		t.Fatal("admission limit")
	}
	g.Done()
	if !g.Admit() {
		t.Fatal("released")
	}
}

func TestKeyFileSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	store, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	opts := Options{KeyFile: filepath.Join(dir, "k")}
	s1, _ := New(context.Background(), store, opts)
	s1.SetPassword(context.Background(), tester, "u", "pw", 0)
	s2, err := New(context.Background(), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sec, ok := s2.SigningSecret("u"); !ok || string(sec) != "pw" {
		t.Fatal("secret unreadable after a restart")
	}
	if !s2.VerifyPassword("u", "pw") || s2.VerifyPassword("u", "px") {
		t.Fatal("password check after a restart")
	}
}
