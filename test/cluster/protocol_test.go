//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// startProtocolNodes starts n protocol-only nodes (ids protocolID.., on
// protocolHosts) beside the members.
func (c *cluster) startProtocolNodes(n int) {
	for i := range n {
		m := &member{id: protocolID + i, dir: filepath.Join(c.root, fmt.Sprint("protocol", i+1)), host: protocolHosts[i]}
		c.protocol = append(c.protocol, m)
		c.startProtocol(m)
	}
	for _, m := range c.protocol {
		c.wait(m)
	}
}

// startProtocol starts a protocol-only node's process.
func (c *cluster) startProtocol(m *member) {
	saved := c.env
	c.env = append(append([]string(nil), c.env...), envRole+"=protocol", envHost+"="+m.host)
	c.start(m)
	c.env = saved
}

// TestClusterProtocolNodes: three members and two protocol-only nodes;
// RocketMQ clients — rocketmq-client-go sync sends and a push consumer,
// the RocketMQ 5 producer and SimpleConsumer — given only the protocol-only
// nodes' addresses, and the admin API through one of them; a
// pulsar-client-go producer given the protocol-only nodes' Pulsar ports,
// whose lookups name protocol-only nodes; MQTT clients given the
// protocol-only nodes' MQTT ports (relayed to group 0's leader). The members
// answer routes naming protocol-only nodes (every gRPC send is acknowledged
// by one). A protocol-only node's SIGKILL and a member's SIGKILL cost
// retries, not messages: every acknowledged message is received.
func TestClusterProtocolNodes(t *testing.T) {
	c := newCluster(t, envGroups+"=0", envPulsar+"=1", envMQTT+"=1") // a group per member
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.startProtocolNodes(2)
	c.viaProtocol = true
	proto := c.protocol[0]
	// The groups settle at their preferred members first: a client made
	// during a hand-off (pulsar-client-go's CreateProducer) fails rather
	// than retries when its connection closes.
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
	for _, m := range c.protocol {
		apptest.Eventually(t, 30*time.Second, "protocol-only node healthy", func() bool {
			resp, err := http.Get("http://" + net.JoinHostPort(m.host, strconv.Itoa(c.ports[5])) + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	for _, topic := range []string{"proto-rmq", "proto-grpc", "proto-ordered"} {
		apptest.Eventually(t, 30*time.Second, "topic "+topic+" made through the protocol-only node's admin API", func() bool {
			code, err := c.adminTry(ctx, t, proto, http.MethodPost, "/api/v1/topics", map[string]any{"name": topic, "queues": 6}, nil)
			return err == nil && (code == http.StatusOK || code == http.StatusCreated || code == http.StatusConflict)
		})
	}
	apptest.Eventually(t, 30*time.Second, "the cluster's status (through a protocol-only node) listing both as protocol-only nodes", func() bool {
		st, ok := c.statusFrom(ctx, proto)
		roles := map[int]string{}
		for _, n := range st.Nodes {
			roles[int(n.ID)] = n.Role
		}
		return ok && roles[protocolID] == "protocol" && roles[protocolID+1] == "protocol" && roles[1] == "member"
	})
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	for _, topic := range []string{"proto-kafka", "proto-txn", "proto-pulsar"} {
		if resp, err := adm.CreateTopic(ctx, 6, -1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create %s through a protocol-only node: %v %v", topic, err, resp.Err)
		}
	}
	md, err := adm.Metadata(ctx, "proto-kafka")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range md.Brokers {
		if !strings.HasPrefix(b.Host, "127.0.0.2") {
			t.Fatalf("Kafka metadata through a protocol-only node names broker %d at %s", b.NodeID, b.Host)
		}
	}
	kl := startLoad(t, c, "proto-kafka", 2) // idempotent, acks=all
	tl := startTxnLoad(t, c, "proto-txn")
	consumed := startGroupConsumer(t, c, "proto-kafka", "proto-audit") // KIP-848
	rl := startRemotingLoad(t, c, "proto-rmq")
	ol := startOrderedLoad(t, c, "proto-ordered")
	gl := startGRPCLoad(t, c, "proto-grpc", 4)
	for p := range 6 {
		addr := net.JoinHostPort(proto.host, strconv.Itoa(c.ports[6]))
		if got := pulsarLookup(t, addr, fmt.Sprint("proto-pulsar-partition-", p)); !strings.HasPrefix(got, "pulsar://127.0.0.2") {
			t.Fatalf("a Pulsar lookup through a protocol-only node names %s", got)
		}
	}
	pl := startPulsarLoad(t, c.pulsarClient(t), "proto-pulsar")
	var mqttURLs []string
	for _, m := range c.protocol {
		mqttURLs = append(mqttURLs, "tcp://"+net.JoinHostPort(m.host, strconv.Itoa(c.ports[7])))
	}
	ml := startMQTTLoad(t, "proto-mqtt", mqttURLs...)
	progress := func(what string, since time.Time, more int) {
		r0, g0, k0, p0, m0 := rl.ackCount(), gl.ackCount(), kl.count(), pl.ackCount(), ml.ackCount()
		apptest.Eventually(t, 60*time.Second, what, func() bool {
			return rl.ackCount() >= r0+more && gl.ackCount() >= g0+more && kl.count() >= k0+more && pl.ackCount() >= p0+more &&
				ml.ackCount() >= m0+more
		})
		t.Logf("%s: %d more remoting, %d more gRPC, %d more Kafka, %d more Pulsar and %d more MQTT sends acknowledged %v later", what,
			rl.ackCount()-r0, gl.ackCount()-g0, kl.count()-k0, pl.ackCount()-p0, ml.ackCount()-m0, time.Since(since).Round(time.Millisecond))
	}
	progress("sends through the protocol-only nodes", time.Now(), 100)

	c.kill(proto)
	killed := time.Now()
	progress("sends after a protocol-only node's SIGKILL", killed, 100)
	c.startProtocol(proto)
	c.wait(proto)

	victim := c.member(c.groupLeader(ctx, t, 1))
	c.kill(victim)
	progress("sends after a member's SIGKILL", time.Now(), 100)
	c.start(victim)
	c.wait(victim)
	progress("sends after the member's restart", time.Now(), 100)

	rl.stop()
	ol.stop()
	gl.stop()
	kl.stop()
	tl.stop()
	pl.stop()
	ml.stop()
	ml.verify(t)
	stored := readTopic(ctx, t, c, "proto-pulsar", pl.ackCount())
	for v := range pl.acked() {
		if stored[v].count != 1 {
			t.Fatalf("Pulsar message %s stored %d times", v, stored[v].count)
		}
	}
	rl.verify(t)
	ol.verify(t)
	gl.verify(t)
	verify(t, c, "proto-kafka", kl.acks)
	consumed.readAll(t, kl.acks, 60*time.Second)
	tl.verify(t, c)
	gl.mu.Lock()
	defer gl.mu.Unlock()
	for endpoint, n := range gl.brokers {
		host, _, _ := net.SplitHostPort(endpoint)
		if !strings.HasPrefix(host, "127.0.0.2") {
			t.Errorf("%d gRPC sends acknowledged through %s, not a protocol-only node", n, endpoint)
		}
	}
	t.Logf("gRPC sends by endpoint %v; remoting sends by broker %v, %d failed", gl.brokers, rl.brokers, rl.failed)

}

// orderedLoad sends messages of six keys (rocketmq-client-go, the hash
// queue selector: a key's messages go to one queue), each retried until it
// is acknowledged, and an orderly push consumer checks each key arrives in
// send order (a redelivery after a failure allowed, never a gap).
type orderedLoad struct {
	*runner
	mu       sync.Mutex
	sent     map[int]int // key → messages acknowledged
	next     map[int]int // key → the next expected
	disorder []string
}

const orderedKeys = 6

func startOrderedLoad(t *testing.T, c *cluster, topic string) *orderedLoad {
	l := &orderedLoad{runner: newRunner(), sent: map[int]int{}, next: map[int]int{}}
	ns := primitive.NewPassthroughResolver(c.clientAddrs(3))
	p, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName("ordered-producer"),
		producer.WithInstanceName("ordered-producer"), producer.WithQueueSelector(producer.NewHashQueueSelector()),
		producer.WithRetry(0), producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(ns), consumer.WithGroupName("ordered-consumer"),
		consumer.WithInstance("ordered-consumer"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerOrder(true))
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, m := range msgs {
			var k, i int
			fmt.Sscanf(string(m.Body), "k%d:%d", &k, &i)
			if i < l.next[k] {
				continue // redelivered: at least once
			}
			if i != l.next[k] {
				l.disorder = append(l.disorder, fmt.Sprintf("key %d: %d after %d", k, i, l.next[k]-1))
			}
			l.next[k] = i + 1
		}
		return consumer.ConsumeSuccess, nil
	})
	if err == nil {
		err = pc.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Shutdown() })
	l.goLoop(func(ctx context.Context) {
		defer func() { _ = p.Shutdown() }()
		for i := 0; ctx.Err() == nil; i++ {
			for k := 0; k < orderedKeys && ctx.Err() == nil; k++ {
				m := primitive.NewMessage(topic, []byte(fmt.Sprintf("k%d:%d", k, i)))
				m.WithShardingKey(fmt.Sprintf("key-%d", k))
				for ctx.Err() == nil { // the next message of a key waits for this one
					res, err := p.SendSync(context.Background(), m)
					if err == nil && res.Status == primitive.SendOK {
						l.mu.Lock()
						l.sent[k] = i + 1
						l.mu.Unlock()
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return l
}

// verify waits until every acknowledged message was consumed, each key in
// order.
func (l *orderedLoad) verify(t *testing.T) {
	t.Helper()
	apptest.Eventually(t, 90*time.Second, "every ordered message consumed", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for k := range orderedKeys {
			if l.next[k] < l.sent[k] {
				return false
			}
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.disorder) > 0 {
		t.Errorf("ordered consumption out of order: %v", l.disorder)
	}
	t.Logf("ordered: %v messages by key, consumed in order", l.sent)
}
