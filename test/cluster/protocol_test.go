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
	"testing"
	"time"

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
// nodes' addresses, and the admin API through one of them. The members
// answer routes naming protocol-only nodes (every gRPC send is acknowledged
// by one). A protocol-only node's SIGKILL and a member's SIGKILL cost
// retries, not messages: every acknowledged message is received.
func TestClusterProtocolNodes(t *testing.T) {
	c := newCluster(t, envGroups+"=0") // a group per member
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.startProtocolNodes(2)
	c.viaProtocol = true
	proto := c.protocol[0]
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
	for _, topic := range []string{"proto-rmq", "proto-grpc"} {
		apptest.Eventually(t, 30*time.Second, "topic "+topic+" made through the protocol-only node's admin API", func() bool {
			code, err := c.adminTry(ctx, t, proto, http.MethodPost, "/api/v1/topics", map[string]any{"name": topic, "queues": 6}, nil)
			return err == nil && (code == http.StatusOK || code == http.StatusCreated || code == http.StatusConflict)
		})
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	for _, topic := range []string{"proto-kafka", "proto-txn"} {
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
	gl := startGRPCLoad(t, c, "proto-grpc", 4)
	progress := func(what string, since time.Time, more int) {
		r0, g0, k0 := rl.ackCount(), gl.ackCount(), kl.count()
		apptest.Eventually(t, 60*time.Second, what, func() bool {
			return rl.ackCount() >= r0+more && gl.ackCount() >= g0+more && kl.count() >= k0+more
		})
		t.Logf("%s: %d more remoting, %d more gRPC and %d more Kafka sends acknowledged %v later", what,
			rl.ackCount()-r0, gl.ackCount()-g0, kl.count()-k0, time.Since(since).Round(time.Millisecond))
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
	gl.stop()
	kl.stop()
	tl.stop()
	rl.verify(t)
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
