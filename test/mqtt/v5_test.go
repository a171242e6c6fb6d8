package mqtt_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// client5 connects a paho.golang (MQTT 5) client; received messages go to
// the returned channel.
func client5(t testing.TB, n *apptest.TestNode, id string, props *paho.ConnectProperties) (*paho.Client, *paho.Connack, chan *paho.Publish) {
	t.Helper()
	nc, err := net.Dial("tcp", n.App.Addr("mqtt"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *paho.Publish, 100)
	c := paho.NewClient(paho.ClientConfig{ClientID: id, Conn: nc, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { got <- pr.Packet; return true, nil }}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true, Properties: props})
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ack, got
}

func receive5(t testing.TB, ch chan *paho.Publish) *paho.Publish {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
		return nil
	}
}

// TestMQTT5: subscription identifiers, user properties, request/response
// (response topic and correlation data), message expiry, no-local and a
// topic alias set by the publisher travel as MQTT 5 says; CONNACK names
// the server's limits.
func TestMQTT5(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	ctx := context.Background()
	sub, ack, got := client5(t, n, "v5-sub", nil)
	if ack.ReasonCode != 0 || ack.Properties == nil || ack.Properties.TopicAliasMaximum == nil || *ack.Properties.TopicAliasMaximum == 0 {
		t.Fatalf("connack %+v", ack)
	}
	id := 7
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Properties: &paho.SubscribeProperties{SubscriptionIdentifier: &id},
		Subscriptions: []paho.SubscribeOptions{{Topic: "req/+", QoS: 1}, {Topic: "req/#", QoS: 2, NoLocal: true}}}); err != nil {
		t.Fatal(err)
	}
	pub, _, _ := client5(t, n, "v5-pub", nil)
	alias := uint16(3)
	expiry := uint32(60)
	for i := range 3 {
		p := &paho.Publish{Topic: "req/orders", QoS: 1, Payload: []byte(fmt.Sprint("ask", i)), Properties: &paho.PublishProperties{
			ResponseTopic: "resp/orders", CorrelationData: []byte{byte(i)}, MessageExpiry: &expiry, TopicAlias: &alias,
			User: paho.UserProperties{{Key: "trace", Value: fmt.Sprint("t", i)}}}}
		if i > 0 {
			p.Topic = "" // the alias names it
		}
		if _, err := pub.Publish(ctx, p); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i := range 3 {
		m := receive5(t, got)
		pr := m.Properties
		if string(m.Payload) != fmt.Sprint("ask", i) || m.Topic != "req/orders" || m.QoS != 1 || pr == nil ||
			pr.ResponseTopic != "resp/orders" || len(pr.CorrelationData) != 1 || pr.CorrelationData[0] != byte(i) ||
			pr.User.Get("trace") != fmt.Sprint("t", i) || pr.MessageExpiry == nil || *pr.MessageExpiry == 0 || *pr.MessageExpiry > 60 ||
			pr.SubscriptionIdentifier == nil || *pr.SubscriptionIdentifier != 7 {
			t.Fatalf("message %d: %q on %s at QoS %d, properties %+v", i, m.Payload, m.Topic, m.QoS, pr)
		}
	}
	// No-local: the subscriber's own publish matches only its req/+
	// filter (no-local off): one copy, at that filter's QoS.
	if _, err := sub.Publish(ctx, &paho.Publish{Topic: "req/self", QoS: 2, Payload: []byte("mine")}); err != nil {
		t.Fatal(err)
	}
	if m := receive5(t, got); string(m.Payload) != "mine" || m.QoS != 1 {
		t.Fatalf("own message: %q at QoS %d", m.Payload, m.QoS)
	}
	select {
	case m := <-got:
		t.Fatalf("a second copy: %q", m.Payload)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestSessionResumes: a 3.1.1 client without clean session that goes
// away and comes back gets the QoS 1 messages published meanwhile.
func TestSessionResumes(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	var in inbox
	c := client(t, n, "durable", false)
	wait(t, c.Subscribe("jobs/#", 1, in.handler), "subscribe")
	c.Disconnect(100)
	pub := client(t, n, "jobs-pub", true)
	for i := range 20 {
		wait(t, pub.Publish("jobs/a", 1, false, fmt.Sprint("job", i)), "publish")
	}
	var mu sync.Mutex
	var again []string
	opts := clientOpts(n, "durable", false).SetDefaultPublishHandler(func(_ pahoClient, m pahoMessage) {
		mu.Lock()
		again = append(again, string(m.Payload()))
		mu.Unlock()
	})
	c2 := connect(t, opts)
	defer c2.Disconnect(100)
	apptest.Eventually(t, 10*time.Second, "the 20 messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(again) >= 20
	})
	mu.Lock()
	defer mu.Unlock()
	for i, v := range again[:20] {
		if v != fmt.Sprint("job", i) {
			t.Fatalf("message %d: %q", i, v)
		}
	}
}

// TestTopicAliasesToClients: a client that takes two topic aliases gets
// its first two topics' names once each, then the alias alone; a third
// topic comes by name.
func TestTopicAliasesToClients(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	ctx := context.Background()
	two := uint16(2)
	sub, _, got := client5(t, n, "alias-sub", &paho.ConnectProperties{TopicAliasMaximum: &two})
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "alias/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub, _, _ := client5(t, n, "alias-pub", nil)
	type seen struct {
		topic string
		alias uint16
	}
	want := []seen{{"alias/a", 1}, {"", 1}, {"alias/b", 2}, {"alias/c", 0}, {"", 2}, {"alias/c", 0}}
	for i, topic := range []string{"alias/a", "alias/a", "alias/b", "alias/c", "alias/b", "alias/c"} {
		// (one at a time: topics' messages are in different queues)
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(topic)}); err != nil {
			t.Fatal(err)
		}
		w := want[i]
		p := receive5(t, got)
		var alias uint16
		if p.Properties != nil && p.Properties.TopicAlias != nil {
			alias = *p.Properties.TopicAlias
		}
		if p.Topic != w.topic || alias != w.alias {
			t.Fatalf("message %d (%s): topic %q alias %d, want %q %d", i, p.Payload, p.Topic, alias, w.topic, w.alias)
		}
	}
}

// TestEnhancedAuthRefused: a CONNECT naming an authentication method gets
// CONNACK 0x8C (bad authentication method): none is supported.
func TestEnhancedAuthRefused(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	nc, err := net.Dial("tcp", n.App.Addr("mqtt"))
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{ClientID: "auth-method", Conn: nc})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, &paho.Connect{ClientID: "auth-method", KeepAlive: 30, CleanStart: true,
		Properties: &paho.ConnectProperties{AuthMethod: "SCRAM-SHA-1", AuthData: []byte("n,,n=user,r=nonce")}})
	if err == nil || ack == nil || ack.ReasonCode != 0x8C {
		t.Fatalf("connect with an authentication method: %+v %v", ack, err)
	}
}
