package rocketmq_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

const aclJWTSecret = "0123456789abcdef0123456789abcdef-rocketmq"

var aclPasswords = map[string]string{"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}

// startACLNode starts a node that requires signed remoting requests, checks
// ACLs, has User:admin as super user and a SASL Kafka listener.
func startACLNode(t *testing.T) *apptest.TestNode {
	t.Helper()
	c := apptest.TestConfig(t.TempDir())
	c.Listen.KafkaListeners = "SASL_PLAINTEXT://127.0.0.1:0"
	c.Security.Authorization = true
	c.Security.SuperUsers = "User:admin"
	c.Security.RemotingAuthentication = true
	c.Security.FailureDelay = time.Millisecond
	c.Security.JWTHMACSecret = aclJWTSecret
	n := apptest.StartTestNode(t, c)
	for u, pw := range aclPasswords {
		if err := n.App.Security().SetPassword(context.Background(), security.User("test"), u, pw, 0); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func credentials(user string) primitive.Credentials {
	return primitive.Credentials{AccessKey: user, SecretKey: aclPasswords[user]}
}

// kafkaAs is a franz-go client of user on the node's SASL listener.
func kafkaAs(t *testing.T, n *apptest.TestNode, user string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.KafkaAddr()), kgo.RequestRetries(1),
		kgo.SASL(scram.Auth{User: user, Pass: aclPasswords[user]}.AsSha512Mechanism())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopicDirect(t *testing.T, n *apptest.TestNode, topic string, queues int) {
	t.Helper()
	name, _ := model.ParseTopicName(topic)
	if _, err := n.App.Broker().CreateTopic(context.Background(), name, queues, broker.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
}

func sendOne(p interface {
	SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
}, topic, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte(body)))
	if err == nil && r.Status != primitive.SendOK {
		err = fmt.Errorf("send status %v", r.Status)
	}
	return err
}

// TestRemotingACL: rocketmq-client-go without credentials, with a wrong
// secret, and as a user without ACLs is refused and writes nothing; ACLs
// made through the Kafka API let the same principal produce and consume
// over remoting as over Kafka; deny beats allow; the super user may do
// everything.
func TestRemotingACL(t *testing.T) {
	n := startACLNode(t)
	addr := n.RemotingAddr()
	ctx := context.Background()
	createTopicDirect(t, n, "rmq-acl", 2)
	admin := kadm.NewClient(kafkaAs(t, n, "admin"))
	ends := func() int64 {
		o, err := admin.ListEndOffsets(ctx, "rmq-acl")
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		o.Each(func(l kadm.ListedOffset) { sum += l.Offset })
		return sum
	}

	anon := startProducer(t, addr, "acl-anon")
	if err := sendOne(anon, "rmq-acl", "anonymous"); err == nil {
		t.Fatal("an unsigned producer was allowed")
	}
	wrong := startProducer(t, addr, "acl-wrong", producer.WithCredentials(primitive.Credentials{AccessKey: "alice", SecretKey: "nope"}))
	if err := sendOne(wrong, "rmq-acl", "wrong secret"); err == nil {
		t.Fatal("a wrong secret was allowed")
	}
	alice := startProducer(t, addr, "acl-alice", producer.WithCredentials(credentials("alice")))
	if err := sendOne(alice, "rmq-acl", "no acl"); err == nil || !strings.Contains(err.Error(), "permission") {
		t.Fatalf("alice without an ACL: %v", err)
	}
	if e := ends(); e != 0 {
		t.Fatalf("refused sends wrote %d messages", e)
	}

	// ACLs through the Kafka API apply to the RocketMQ client of the same user.
	if _, err := admin.CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts().Topics("rmq-acl").Groups("rmq-acl-cg").
		Operations(kadm.OpWrite, kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := sendOne(alice, "rmq-acl", fmt.Sprint("m", i)); err != nil {
			t.Fatalf("alice with an ACL: %v", err)
		}
	}
	var mu sync.Mutex
	got := map[string]bool{}
	startConsumer(t, addr, "rmq-acl-cg", "rmq-acl", consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[string(m.Body)] = true
		}
		return consumer.ConsumeSuccess, nil
	}, consumer.WithCredentials(credentials("alice")))
	eventually(t, 30*time.Second, "alice's consumer reads 10 messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 10
	})
	// The same principal over Kafka reads them; bob may not.
	kc := kafkaAs(t, n, "alice", kgo.ConsumeTopics("rmq-acl"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	read := 0
	for read < 10 {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := kc.PollFetches(fctx)
		cancel()
		if err := fs.Err0(); err != nil {
			t.Fatalf("alice over Kafka: %v", err)
		}
		read += fs.NumRecords()
	}
	bob := startProducer(t, addr, "acl-bob", producer.WithCredentials(credentials("bob")))
	if err := sendOne(bob, "rmq-acl", "bob"); err == nil {
		t.Fatal("bob without an ACL was allowed")
	}

	// Deny beats allow, over both protocols.
	if _, err := admin.CreateACLs(ctx, kadm.NewACLs().Deny("User:alice").DenyHosts().Topics("rmq-").
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternPrefixed)); err != nil {
		t.Fatal(err)
	}
	if err := sendOne(alice, "rmq-acl", "denied"); err == nil {
		t.Fatal("deny did not beat allow")
	}
	// The super user may do everything.
	root := startProducer(t, addr, "acl-admin", producer.WithCredentials(credentials("admin")))
	if err := sendOne(root, "rmq-acl", "admin"); err != nil {
		t.Fatalf("super user: %v", err)
	}
	if e := ends(); e != 11 {
		t.Fatalf("%d messages stored, want alice's 10 and admin's 1", e)
	}
}

// signJava signs a request as the Java client's AclClientRPCHook does
// (SecurityToken included), for raw requests.
func signJava(req *protocol.Command, ak, sk, token string) {
	req.SetExt("AccessKey", ak)
	if token != "" {
		req.SetExt("SecurityToken", token)
	}
	fields := req.ExtFields.Map()
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	m := hmac.New(sha1.New, []byte(sk))
	for _, k := range keys {
		m.Write([]byte(fields[k]))
	}
	m.Write(req.Body)
	req.SetExt("Signature", base64.StdEncoding.EncodeToString(m.Sum(nil)))
}

// TestRemotingSignatures: a Java-style signature (SecurityToken signed) is
// accepted as well as the Go client's; a tampered header is refused.
func TestRemotingSignatures(t *testing.T) {
	n := startACLNode(t)
	createTopicDirect(t, n, "sig", 1)
	req := func() *protocol.Command {
		return &protocol.Command{Code: protocol.GetMaxOffset, ExtFields: protocol.FieldsOf(map[string]string{"topic": "sig", "queueId": "0"})}
	}
	r := req()
	signJava(r, "admin", "admin-secret", "some-token")
	if resp := call(t, n.RemotingAddr(), r); resp.Code != protocol.Success {
		t.Fatalf("java-style signature: %d %s", resp.Code, resp.Remark)
	}
	r = req()
	signJava(r, "admin", "admin-secret", "")
	r.SetExt("queueId", "1")
	if resp := call(t, n.RemotingAddr(), r); resp.Code != protocol.NoPermission {
		t.Fatalf("tampered request: %d %s", resp.Code, resp.Remark)
	}
	if resp := call(t, n.RemotingAddr(), req()); resp.Code != protocol.NoPermission {
		t.Fatalf("unsigned request: %d %s", resp.Code, resp.Remark)
	}
}

// TestRemotingACLAdmin: RocketMQ's ACL 2.0 admin codes create a user and
// its ACL in the store Kafka's ACL API reads; the user sends at once;
// deleting the ACL takes the permission away; passwords are never shown.
func TestRemotingACLAdmin(t *testing.T) {
	n := startACLNode(t)
	addr := n.RemotingAddr()
	createTopicDirect(t, n, "rmq-admin", 1)
	admin := func(code int32, ext map[string]string, body string) *protocol.Command {
		r := &protocol.Command{Code: code, ExtFields: protocol.FieldsOf(ext), Body: []byte(body)}
		signJava(r, "admin", "admin-secret", "")
		return call(t, addr, r)
	}
	if r := admin(protocol.AuthCreateUser, map[string]string{"username": "carol"},
		`{"username":"carol","password":"carol-secret","userType":"Normal","userStatus":"enable"}`); r.Code != protocol.Success {
		t.Fatalf("create user: %d %s", r.Code, r.Remark)
	}
	if r := admin(protocol.AuthCreateACL, map[string]string{"subject": "User:carol"},
		`{"subject":"User:carol","policies":[{"policyType":"Custom","entries":[{"resource":"Topic:rmq-admin","actions":["Pub","Get"],"decision":"Allow"}]}]}`); r.Code != protocol.Success {
		t.Fatalf("create acl: %d %s", r.Code, r.Remark)
	}
	r := admin(protocol.AuthGetUser, map[string]string{"username": "carol"}, "")
	if r.Code != protocol.Success || strings.Contains(string(r.Body), "carol-secret") || !strings.Contains(string(r.Body), `"userType":"Normal"`) {
		t.Fatalf("get user: %d %s", r.Code, r.Body)
	}
	if r := admin(protocol.AuthListACL, map[string]string{"subjectFilter": "carol"}, ""); r.Code != protocol.Success ||
		!strings.Contains(string(r.Body), `"resource":"Topic:rmq-admin"`) {
		t.Fatalf("list acl: %d %s", r.Code, r.Body)
	}
	// Kafka's ACL API sees the same binding.
	described, err := kadm.NewClient(kafkaAs(t, n, "admin")).DescribeACLs(context.Background(),
		kadm.NewACLs().Allow("User:carol").AllowHosts().Topics("rmq-admin").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || len(described) != 1 || len(described[0].Described) != 1 {
		t.Fatalf("kafka describe of carol's ACL: %+v %v", described, err)
	}
	carol := startProducer(t, addr, "acl-carol", producer.WithCredentials(primitive.Credentials{AccessKey: "carol", SecretKey: "carol-secret"}))
	if err := sendOne(carol, "rmq-admin", "hello"); err != nil {
		t.Fatalf("carol with an ACL made over remoting: %v", err)
	}
	if r := admin(protocol.AuthDeleteACL, map[string]string{"subject": "User:carol", "resource": "Topic:rmq-admin"}, ""); r.Code != protocol.Success {
		t.Fatalf("delete acl: %d %s", r.Code, r.Remark)
	}
	if err := sendOne(carol, "rmq-admin", "again"); err == nil {
		t.Fatal("carol sent after her ACL was deleted")
	}
	// Not a super user: alice may not manage users.
	r = &protocol.Command{Code: protocol.AuthListUser, ExtFields: protocol.FieldsOf(map[string]string{})}
	signJava(r, "alice", "alice-secret", "")
	if resp := call(t, addr, r); resp.Code != protocol.NoPermission {
		t.Fatalf("alice listing users: %d %s", resp.Code, resp.Remark)
	}
}

// TestRemotingTokenAccessKey: a JWT works as a RocketMQ access key (the
// secret key is not used): the client acts as the token's subject, with
// its ACLs; a forged token is refused.
func TestRemotingTokenAccessKey(t *testing.T) {
	n := startACLNode(t)
	createTopicDirect(t, n, "rmq-token", 1)
	for _, err := range n.App.Security().CreateACLs(context.Background(), security.User("test"), []security.Binding{{
		ResourceType: security.ResourceTopic, ResourceName: "rmq-token", PatternType: security.PatternLiteral,
		Principal: "User:svc-billing", Host: "*", Operation: security.OpWrite, Permission: security.PermissionAllow}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	token := func(key string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "svc-billing", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := startProducer(t, n.RemotingAddr(), "tok-good", producer.WithCredentials(primitive.Credentials{AccessKey: token(aclJWTSecret), SecretKey: "unused"}))
	if err := sendOne(good, "rmq-token", "via token"); err != nil {
		t.Fatalf("token access key: %v", err)
	}
	forged := startProducer(t, n.RemotingAddr(), "tok-forged", producer.WithCredentials(primitive.Credentials{
		AccessKey: token("not-the-key-not-the-key-not-the-key"), SecretKey: "unused"}))
	if err := sendOne(forged, "rmq-token", "forged"); err == nil {
		t.Fatal("a forged token was accepted")
	}
}

// TestRemotingNamespaceACL: an ACL on a RocketMQ namespace (the clients'
// namespace option) lets its user in there and nowhere else; another user
// stays out of it.
func TestRemotingNamespaceACL(t *testing.T) {
	n := startACLNode(t)
	for _, ns := range []string{"acme", "globex"} {
		createTopicDirect(t, n, ns+"/orders", 1)
	}
	for _, err := range n.App.Security().CreateACLs(context.Background(), security.User("test"), []security.Binding{{
		ResourceType: security.ResourceNamespace, ResourceName: "public/acme", PatternType: security.PatternLiteral,
		Principal: "User:alice", Host: "*", Operation: security.OpAll, Permission: security.PermissionAllow}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	in := func(user, ns string) interface {
		SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
	} {
		return startProducer(t, n.RemotingAddr(), "ns-"+user+"-"+ns, producer.WithCredentials(credentials(user)), producer.WithNamespace(ns))
	}
	if err := sendOne(in("alice", "acme"), "orders", "mine"); err != nil {
		t.Fatalf("alice in her namespace: %v", err)
	}
	if err := sendOne(in("alice", "globex"), "orders", "theirs"); err == nil {
		t.Fatal("alice wrote to another namespace")
	}
	if err := sendOne(in("bob", "acme"), "orders", "bob"); err == nil {
		t.Fatal("bob wrote to alice's namespace")
	}
}
