package kafka_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

// secureNode is a node with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL Kafka
// listeners, authorization on and User:admin a super user.
type secureNode struct {
	*apptest.TestNode
	plain, sasl, saslSSL string
}

var testPasswords = map[string]string{"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}

func startSecureNode(t *testing.T, tweak func(c *app.Config)) *secureNode {
	t.Helper()
	c := apptest.TestConfig(t.TempDir())
	c.Listen.KafkaListeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
	c.Security.Authorization = true
	c.Security.SuperUsers = "User:admin"
	c.Security.SASLMechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
	c.Security.JWTHMACSecret = testJWTSecret
	c.Security.FailureDelay = 10 * time.Millisecond
	if tweak != nil {
		tweak(&c)
	}
	n := apptest.StartTestNode(t, c)
	ctx := ctxTimeout(t, 30*time.Second)
	for user, pw := range testPasswords {
		if err := n.App.Security().SetPassword(ctx, security.User("test"), user, pw, 0); err != nil {
			t.Fatal(err)
		}
	}
	return &secureNode{TestNode: n, plain: n.App.Addr("kafka/PLAINTEXT"), sasl: n.App.Addr("kafka/SASL_PLAINTEXT"),
		saslSSL: n.App.Addr("kafka/SASL_SSL")}
}

const testJWTSecret = "0123456789abcdef0123456789abcdef-test-key"

// mechanism returns a franz-go SASL mechanism by name.
func mechanism(name, user, pass string) sasl.Mechanism {
	a := scram.Auth{User: user, Pass: pass}
	switch name {
	case "SCRAM-SHA-256":
		return a.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return a.AsSha512Mechanism()
	}
	return plain.Auth{User: user, Pass: pass}.AsMechanism()
}

// userClient is a franz-go client of user over SASL (PLAIN by default).
func (n *secureNode) userClient(t *testing.T, user string, opts ...kgo.Opt) *kgo.Client {
	return newClient(t, n.sasl, append([]kgo.Opt{kgo.SASL(mechanism("SCRAM-SHA-256", user, testPasswords[user])),
		kgo.RequestRetries(2), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
}

// TestSASLMechanisms: each mechanism authenticates with the right secret
// (over SASL_PLAINTEXT and SASL_SSL) and refuses a wrong one, an unknown
// user and a client that does not authenticate at all.
func TestSASLMechanisms(t *testing.T) {
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	admin := n.userClient(t, "admin")
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "sasl"); err != nil {
		t.Fatal(err)
	}
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		for _, addr := range []string{n.sasl, n.saslSSL} {
			opts := []kgo.Opt{kgo.SASL(mechanism(mech, "admin", "admin-secret")), kgo.DefaultProduceTopic("sasl")}
			if addr == n.saslSSL {
				opts = append(opts, kgo.DialTLSConfig(&tls.Config{InsecureSkipVerify: true}))
			}
			cl := newClient(t, addr, opts...)
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(mech)}).FirstErr(); err != nil {
				t.Fatalf("%s on %s: %v", mech, addr, err)
			}
			cl.Close()
		}
		for _, bad := range [][2]string{{"admin", "wrong"}, {"nobody", "admin-secret"}} {
			cl := newClient(t, n.sasl, kgo.SASL(mechanism(mech, bad[0], bad[1])), kgo.RequestRetries(0))
			err := cl.Ping(ctx)
			if !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Fatalf("%s as %s/%s: want SASL_AUTHENTICATION_FAILED, got %v", mech, bad[0], bad[1], err)
			}
			cl.Close()
		}
	}
	// No SASL on a SASL listener: the broker closes the connection.
	cl := newClient(t, n.sasl, kgo.RequestRetries(0), kgo.DefaultProduceTopic("sasl"))
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte("anonymous")}).FirstErr(); err == nil {
		t.Fatal("a client without SASL produced on a SASL listener")
	}
	end := endOffsets(t, admin, "sasl")
	if end[0] != 6 {
		t.Fatalf("end offset %d, want the 6 authenticated records", end[0])
	}
}

// endOffsets lists a topic's end offsets by partition.
func endOffsets(t *testing.T, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// TestACLs: a principal without an ACL gets TOPIC_AUTHORIZATION_FAILED and
// writes nothing; ACLs made with kadm grant, deny wins over allow, the
// super user may do everything, anonymous PLAINTEXT clients nothing; ACLs
// round-trip through Describe and Delete.
func TestACLs(t *testing.T) {
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	admin := n.userClient(t, "admin")
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	alice := n.userClient(t, "alice", kgo.DefaultProduceTopic("orders"))
	if err := alice.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice without an ACL: want TOPIC_AUTHORIZATION_FAILED, got %v", err)
	}
	if e := endOffsets(t, admin, "orders"); e[0]+e[1] != 0 {
		t.Fatalf("a refused produce wrote records: %v", e)
	}

	grant := kadm.NewACLs().Allow("User:alice").AllowHosts().Topics("orders").Groups("alice-group").
		Operations(kadm.OpRead, kadm.OpWrite, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := adm.CreateACLs(ctx, grant)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create ACL %+v: %v", r, r.Err)
		}
	}
	for i := range 10 {
		if err := alice.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint("v", i))}).FirstErr(); err != nil {
			t.Fatalf("alice with an ACL: %v", err)
		}
	}
	consumer := n.userClient(t, "alice", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("alice-group"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < 10 {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("alice consuming: %v", err)
		}
		got += fs.NumRecords()
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("alice committing: %v", err)
	}
	consumer.Close()

	// bob has nothing: cannot read the topic or use alice's group.
	bob := n.userClient(t, "bob")
	if _, err := kadm.NewClient(bob).FetchOffsets(ctx, "alice-group"); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("bob fetching alice's offsets: want GROUP_AUTHORIZATION_FAILED, got %v", err)
	}
	if topics, err := kadm.NewClient(bob).ListTopics(ctx); err != nil || len(topics) != 0 {
		t.Fatalf("bob lists topics he may not describe: %v %v", topics.Names(), err)
	}

	// A prefixed deny beats the literal allow.
	deny := kadm.NewACLs().Deny("User:alice").DenyHosts().Topics("ord").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternPrefixed)
	if _, err := adm.CreateACLs(ctx, deny); err != nil {
		t.Fatal(err)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Value: []byte("denied")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("deny should beat allow: %v", err)
	}

	// Describe round-trips what was created.
	described, err := adm.DescribeACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts().Deny("User:alice").DenyHosts().AnyResource().
		Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, d := range described {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		count += len(d.Described)
	}
	if count != 7 { // 3 topic + 3 group allows (Kafka ops per resource) + 1 deny
		t.Fatalf("described %d ACLs, want 7: %+v", count, described)
	}

	// The super user may do everything; anonymous PLAINTEXT clients nothing.
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("admin")}).FirstErr(); err != nil {
		t.Fatalf("super user: %v", err)
	}
	anon := newClient(t, n.plain, kgo.DefaultProduceTopic("orders"), kgo.RequestRetries(1))
	if err := anon.ProduceSync(ctx, &kgo.Record{Value: []byte("anon")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("anonymous: want TOPIC_AUTHORIZATION_FAILED, got %v", err)
	}

	// Delete removes the deny; alice writes again.
	deleted, err := adm.DeleteACLs(ctx, kadm.NewACLs().Deny("User:alice").DenyHosts().Topics("ord").Operations(kadm.OpWrite).
		ResourcePatternType(kadm.ACLPatternPrefixed))
	if err != nil || len(deleted) != 1 || len(deleted[0].Deleted) != 1 {
		t.Fatalf("delete: %+v %v", deleted, err)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Value: []byte("again")}).FirstErr(); err != nil {
		t.Fatalf("after deleting the deny: %v", err)
	}
}

// TestSCRAMCredentialsThroughKafka: credentials made with
// AlterUserScramCredentials work at once, describe shows mechanisms and
// iterations only, and deleting them locks the user out.
func TestSCRAMCredentialsThroughKafka(t *testing.T) {
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(n.userClient(t, "admin"))
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "carol-pw"}})
	if err != nil || res.Error() != nil {
		t.Fatalf("alter: %v %v", err, res.Error())
	}
	carol := newClient(t, n.sasl, kgo.SASL(mechanism("SCRAM-SHA-512", "carol", "carol-pw")))
	if err := carol.Ping(ctx); err != nil {
		t.Fatalf("carol right after creation: %v", err)
	}
	carol.Close()
	described, err := adm.DescribeUserSCRAMs(ctx, "carol", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if c := described["carol"]; c.Err != nil || len(c.CredInfos) != 1 || c.CredInfos[0].Iterations != 8192 || c.CredInfos[0].Mechanism != kadm.ScramSha512 {
		t.Fatalf("describe carol: %+v", c)
	}
	if !errors.Is(described["nobody"].Err, kerr.ResourceNotFound) {
		t.Fatalf("describe nobody: %v", described["nobody"].Err)
	}
	res, err = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha512}}, nil)
	if err != nil || res.Error() != nil {
		t.Fatalf("delete: %v %v", err, res.Error())
	}
	carol = newClient(t, n.sasl, kgo.SASL(mechanism("SCRAM-SHA-512", "carol", "carol-pw")), kgo.RequestRetries(0))
	if err := carol.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("carol after deletion: %v", err)
	}
	// A salted password is an HMAC key: Kafka takes any non-empty length.
	res, err = adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "dave", Mechanism: kadm.ScramSha256, Iterations: 4096,
		Salt: []byte("salt"), SaltedPassword: []byte("ten bytes!")}})
	if err != nil || res.Error() != nil {
		t.Fatalf("salted password of 10 bytes: %v %v", err, res.Error())
	}
	res, err = adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "dave", Mechanism: kadm.ScramSha256, Iterations: 4096,
		Salt: []byte("salt"), SaltedPassword: []byte{}}})
	if err == nil && !errors.Is(res.Error(), kerr.UnacceptableCredential) {
		t.Fatalf("empty salted password: %v", res.Error())
	}
	// Not a super user: bob may not alter credentials.
	res, err = kadm.NewClient(n.userClient(t, "bob")).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "x"}})
	if err == nil && !errors.Is(res.Error(), kerr.ClusterAuthorizationFailed) {
		t.Fatalf("bob altering credentials: %v", res.Error())
	}
}

// TestTenantNamespaceACL: an ACL on a namespace covers its topics and no
// other tenant's.
func TestTenantNamespaceACL(t *testing.T) {
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(n.userClient(t, "admin"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "acme/prod/orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "globex/prod/orders"); err != nil {
		t.Fatal(err)
	}
	for _, err := range n.App.Security().CreateACLs(ctx, security.User("test"), []security.Binding{{
		ResourceType: security.ResourceNamespace, ResourceName: "acme/prod", PatternType: security.PatternLiteral,
		Principal: "User:alice", Host: "*", Operation: security.OpAll, Permission: security.PermissionAllow}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	alice := n.userClient(t, "alice")
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "acme/prod/orders", Value: []byte("mine")}).FirstErr(); err != nil {
		t.Fatalf("alice in her namespace: %v", err)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "globex/prod/orders", Value: []byte("theirs")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice in another tenant: %v", err)
	}
	bob := n.userClient(t, "bob")
	if err := bob.ProduceSync(ctx, &kgo.Record{Topic: "acme/prod/orders", Value: []byte("bob")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob in acme: %v", err)
	}
	if e := endOffsets(t, n.userClient(t, "admin"), "globex/prod/orders"); e[0] != 0 {
		t.Fatalf("refused writes landed: %v", e)
	}
}

// kcatSASL returns kcat's SASL arguments.
func kcatSASL(addr, mech, user, pass string) []string {
	return []string{"-b", addr, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=" + mech,
		"-X", "sasl.username=" + user, "-X", "sasl.password=" + pass}
}

// TestKcatSASL: librdkafka (kcat) authenticates with each mechanism,
// produces and consumes under ACLs, and fails with a wrong password.
func TestKcatSASL(t *testing.T) {
	kcat := requireTool(t, "kcat")
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(n.userClient(t, "admin"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "kcat-sasl"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts().Topics("kcat-sasl").
		Operations(kadm.OpRead, kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	for i, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		run(t, 30*time.Second, fmt.Sprintf("%s-%d\n", mech, i), kcat, append(kcatSASL(n.sasl, mech, "alice", "alice-secret"), "-P", "-t", "kcat-sasl")...)
	}
	out := run(t, 30*time.Second, "", kcat, append(kcatSASL(n.sasl, "SCRAM-SHA-512", "alice", "alice-secret"), "-C", "-t", "kcat-sasl", "-o", "beginning", "-e", "-q")...)
	if lines := strings.Fields(out); len(lines) != 3 {
		t.Fatalf("kcat read %q", out)
	}
	if err := runQuiet(kcat, append(kcatSASL(n.sasl, "SCRAM-SHA-256", "alice", "wrong"), "-L", "-m", "5")...); err == nil {
		t.Fatal("kcat with a wrong password listed metadata")
	}
	// bob is authenticated but has no ACL: his records are refused.
	if err := runQuiet(kcat, append(kcatSASL(n.sasl, "PLAIN", "bob", "bob-secret"), "-P", "-t", "kcat-sasl", "-X", "message.timeout.ms=5000")...); err == nil {
		if e := endOffsets(t, n.userClient(t, "admin"), "kcat-sasl"); e[0] != 3 {
			t.Fatalf("bob's records landed: %v", e)
		}
	}
}

// TestKafkaJSSASL: kafkajs authenticates with PLAIN and both SCRAM
// mechanisms, produces and consumes in a group under ACLs, and a wrong
// password is refused.
func TestKafkaJSSASL(t *testing.T) {
	node, dir := nodeScript(t, "kafkajs", "kafkajs not installed (scripts/test.sh runs npm ci)", "node_modules", "kafkajs")
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	adm := kadm.NewClient(n.userClient(t, "admin"))
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "js-sasl"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts().Topics("js-sasl").
		Groups("js-sasl-").Operations(kadm.OpRead, kadm.OpWrite, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternPrefixed)); err != nil {
		t.Fatal(err)
	}
	for _, mech := range []string{"plain", "scram-sha-256", "scram-sha-512"} {
		out := run(t, time.Minute, "", node, filepath.Join(dir, "sasl.js"), n.sasl, mech, "alice", "alice-secret", "js-sasl", "20")
		if !strings.Contains(out, "kafkajs sasl ok: "+mech+" 20 messages") {
			t.Fatalf("kafkajs %s:\n%s", mech, out)
		}
	}
}

// TestUserNamespace: a user bound to a namespace names its topics there:
// "orders" is acme/prod/orders for it, shown back as "orders", while
// other clients see the full name; ACLs still name the topic canonically.
func TestUserNamespace(t *testing.T) {
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, time.Minute)
	sec := n.App.Security()
	if err := sec.SetUserNamespace(ctx, security.User("test"), "alice", "acme/prod"); err != nil {
		t.Fatal(err)
	}
	for _, err := range sec.CreateACLs(ctx, security.User("test"), []security.Binding{{ResourceType: security.ResourceNamespace,
		ResourceName: "acme/prod", PatternType: security.PatternLiteral, Principal: "User:alice", Host: "*",
		Operation: security.OpAll, Permission: security.PermissionAllow}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	alice := n.userClient(t, "alice")
	aadm := kadm.NewClient(alice)
	if _, err := aadm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatalf("alice creates orders in her namespace: %v", err)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("mine")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	topics, err := aadm.ListTopics(ctx)
	if err != nil || !topics.Has("orders") || len(topics) != 1 {
		t.Fatalf("alice's topics: %v %v", topics.Names(), err)
	}
	admin := kadm.NewClient(n.userClient(t, "admin"))
	all, err := admin.ListTopics(ctx)
	if err != nil || !all.Has("acme/prod/orders") || all.Has("orders") {
		t.Fatalf("admin's topics: %v %v", all.Names(), err)
	}
	if e := endOffsets(t, n.userClient(t, "admin"), "acme/prod/orders"); e[0] != 1 {
		t.Fatalf("acme/prod/orders holds %v", e)
	}
	// public/default/orders is not alice's: out of her namespace she needs the full name and an ACL.
	if _, err := admin.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "public/default/orders", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice writing public/default/orders: %v", err)
	}
}
