//go:build !race

package grpc_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

var grpcPasswords = map[string]string{"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}

func credentialConfig(addr, user, secret string) *rmq.Config {
	c := config(addr)
	c.Credentials = &credentials.SessionCredentials{AccessKey: user, AccessSecret: secret}
	return c
}

func sendAs(t *testing.T, cfg *rmq.Config, topic, body string) error {
	t.Helper()
	p, err := rmq.NewProducer(cfg, rmq.WithTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.GracefulStop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := &rmq.Message{Topic: topic, Body: []byte(body)}
	_, err = p.Send(ctx, msg)
	return err
}

// TestGRPCAuthentication: the RocketMQ 5 client without credentials or
// with a wrong secret is refused; a user without ACLs gets
// PERMISSION_DENIED and writes nothing; with ACLs it sends and its
// SimpleConsumer receives and acks; another user may not receive.
func TestGRPCAuthentication(t *testing.T) {
	t.Parallel()
	c := apptest.TestConfig(t.TempDir())
	c.Security.Authorization = true
	c.Security.SuperUsers = "User:admin"
	c.Security.GRPCAuthentication = true
	n := apptest.StartTestNode(t, c)
	ctx := context.Background()
	sec := n.App.Security()
	for u, pw := range grpcPasswords {
		if err := sec.SetPassword(ctx, security.User("test"), u, pw, 0); err != nil {
			t.Fatal(err)
		}
	}
	name, _ := model.ParseTopicName("grpc-acl")
	if _, err := n.App.Broker().CreateTopic(ctx, name, 2, broker.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	stored := func() int64 {
		var sum int64
		for q := range 2 {
			_, hw, _, err := n.App.Broker().Offsets(name, int32(q))
			if err != nil {
				t.Fatal(err)
			}
			sum += int64(hw)
		}
		return sum
	}
	addr := n.GRPCAddr()
	// The client's Start waits for its telemetry settings forever when
	// its credentials are refused, so refusals are checked on raw calls.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := v2.NewMessagingServiceClient(conn)
	sign := func(ak, sk string) context.Context {
		now := time.Now().Format("20060102T150405Z")
		m := hmac.New(sha1.New, []byte(sk))
		m.Write([]byte(now))
		return metadata.AppendToOutgoingContext(ctx, "x-mq-date-time", now, "authorization",
			"MQv2-HMAC-SHA1 Credential="+ak+"//Rocketmq, SignedHeaders=x-mq-date-time, Signature="+hex.EncodeToString(m.Sum(nil)))
	}
	send := &v2.SendMessageRequest{Messages: []*v2.Message{{Topic: &v2.Resource{Name: "grpc-acl"}, Body: []byte("raw"),
		SystemProperties: &v2.SystemProperties{MessageId: "01AB", BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_NORMAL}}}}
	for name, c := range map[string]context.Context{"no credentials": ctx, "wrong secret": sign("alice", "wrong"),
		"unknown user": sign("mallory", "x")} {
		if _, err := raw.SendMessage(c, send); grpcstatus.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: want UNAUTHENTICATED, got %v", name, err)
		}
	}
	if _, err := raw.SendMessage(sign("alice", "alice-secret"), send); grpcstatus.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice without an ACL, raw: want PERMISSION_DENIED, got %v", err)
	}
	err = sendAs(t, credentialConfig(addr, "alice", "alice-secret"), "grpc-acl", "no acl")
	if err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("alice without an ACL: %v", err)
	}
	if s := stored(); s != 0 {
		t.Fatalf("refused sends stored %d messages", s)
	}
	grant := func(rt security.ResourceType, name string, op security.Operation) security.Binding {
		return security.Binding{ResourceType: rt, ResourceName: name, PatternType: security.PatternLiteral, Principal: "User:alice",
			Host: "*", Operation: op, Permission: security.PermissionAllow}
	}
	for _, err := range sec.CreateACLs(ctx, security.User("test"), []security.Binding{grant(security.ResourceTopic, "grpc-acl", security.OpWrite),
		grant(security.ResourceTopic, "grpc-acl", security.OpRead), grant(security.ResourceGroup, "grpc-acl-cg", security.OpRead)}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if err := sendAs(t, credentialConfig(addr, "alice", "alice-secret"), "grpc-acl", "m"+string(rune('0'+i))); err != nil {
			t.Fatalf("alice with an ACL: %v", err)
		}
	}
	consume := func(user string) (int, error) {
		cfg := credentialConfig(addr, user, grpcPasswords[user])
		cfg.ConsumerGroup = "grpc-acl-cg"
		sc, err := rmq.NewSimpleConsumer(cfg, rmq.WithSimpleAwaitDuration(time.Second),
			rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{"grpc-acl": rmq.SUB_ALL}))
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.Start(); err != nil {
			return 0, err
		}
		defer sc.GracefulStop()
		got := 0
		deadline := time.Now().Add(20 * time.Second)
		for got < 5 && time.Now().Before(deadline) {
			msgs, err := sc.Receive(context.Background(), 16, 20*time.Second)
			if err != nil && !strings.Contains(err.Error(), "MESSAGE_NOT_FOUND") {
				return got, err
			}
			for _, m := range msgs {
				if err := sc.Ack(context.Background(), m); err != nil {
					return got, err
				}
				got++
			}
		}
		return got, nil
	}
	if got, err := consume("bob"); err == nil || got != 0 {
		t.Fatalf("bob received %d messages (err %v)", got, err)
	}
	if got, err := consume("alice"); err != nil || got != 5 {
		t.Fatalf("alice received %d messages: %v", got, err)
	}

	// The super user may do everything; a deny beats alice's allow.
	if err := sendAs(t, credentialConfig(addr, "admin", "admin-secret"), "grpc-acl", "admin"); err != nil {
		t.Fatalf("super user: %v", err)
	}
	deny := grant(security.ResourceTopic, "grpc-", security.OpWrite)
	deny.PatternType, deny.Permission = security.PatternPrefixed, security.PermissionDeny
	for _, err := range sec.CreateACLs(ctx, security.User("test"), []security.Binding{deny}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := sendAs(t, credentialConfig(addr, "alice", "alice-secret"), "grpc-acl", "denied"); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("deny should beat allow: %v", err)
	}
	// A namespace ACL covers the client's namespace and no other.
	acme := model.TopicName{Tenant: model.DefaultTenant, Namespace: "acme", Topic: "orders"}
	other := model.TopicName{Tenant: model.DefaultTenant, Namespace: "globex", Topic: "orders"}
	for _, tn := range []model.TopicName{acme, other} {
		if _, err := n.App.Broker().CreateTopic(ctx, tn, 1, broker.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	nsACL := grant(security.ResourceNamespace, "public/acme", security.OpAll)
	for _, err := range sec.CreateACLs(ctx, security.User("test"), []security.Binding{nsACL}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	inNamespace := func(user, ns string) *rmq.Config {
		c := credentialConfig(addr, user, grpcPasswords[user])
		c.NameSpace = ns
		return c
	}
	if err := sendAs(t, inNamespace("alice", "acme"), "orders", "acme"); err != nil {
		t.Fatalf("alice in her namespace: %v", err)
	}
	if err := sendAs(t, inNamespace("alice", "globex"), "orders", "globex"); err == nil {
		t.Fatal("alice wrote to another namespace")
	}
	if err := sendAs(t, inNamespace("bob", "acme"), "orders", "bob"); err == nil {
		t.Fatal("bob wrote to alice's namespace")
	}
}
