//go:build !race

package cluster_test

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// stopExitBound is what a stopping member may take from SIGTERM to its
// exit before the test fails: a member hands its groups off in a round
// trip and exits in about a second; this bound leaves a loaded machine
// room but catches a stop that waits out a timeout (5–10 s) somewhere.
const stopExitBound = 4 * time.Second

// TestClusterStopExit: each member in turn, while it leads its group and
// idempotent Kafka producers, a KIP-848 consumer group and RocketMQ 5
// clients use the cluster, is stopped with SIGTERM and started again; it
// exits promptly every time (the times are printed), nothing
// acknowledged is lost and the consumer group reads everything.
// ROSETTA_CLUSTER_STOP_ROUNDS sets the rounds (1 by default).
func TestClusterStopExit(t *testing.T) {
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	spread := func() bool { return c.spread(ctx) }
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", spread)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	if resp, err := kadm.NewClient(kcl).CreateTopic(ctx, 6, 3, nil, "stop-kafka"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	consumed := startGroupConsumer(t, c, "stop-kafka", "stop-audit")
	kl := startLoad(t, c, "stop-kafka", 2)
	gl := startGRPCLoad(t, c, "stop-grpc", 1)
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("ROSETTA_CLUSTER_STOP_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	var exits, resumed []time.Duration
	for range rounds {
		for _, m := range c.members {
			apptest.Eventually(t, 60*time.Second, "every group led by its preferred member", spread)
			kl.waitAckAfter(t, time.Now(), 30*time.Second)
			g := m.id - 1 // the group it leads
			stopAt := time.Now()
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
			exited := make(chan time.Duration, 1)
			go func() { _ = m.cmd.Wait(); exited <- time.Since(stopAt) }()
			fo := kl.waitAckAfterIn(t, stopAt, 30*time.Second, func(p int32) bool { return int(p)%3 == g })
			var d time.Duration
			select {
			case d = <-exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("member %d did not exit within 30 s of SIGTERM", m.id)
			}
			exits, resumed = append(exits, d), append(resumed, fo)
			t.Logf("member %d (leading group %d) stopped: exited %v after SIGTERM; Kafka produce to its group acknowledged after %v",
				m.id, g, d.Round(time.Millisecond), fo.Round(time.Millisecond))
			if d > stopExitBound {
				t.Errorf("member %d took %v to exit after SIGTERM (bound %v)", m.id, d.Round(time.Millisecond), stopExitBound)
			}
			m.cmd = nil
			c.start(m)
			c.wait(m)
		}
	}
	t.Logf("exit after SIGTERM: %s; Kafka resumed: %s", distribution(exits), distribution(resumed))
	apptest.Eventually(t, 60*time.Second, "every group led by its preferred member", spread)
	gl.stop()
	kl.stop()
	gl.verify(t)
	t.Logf("Kafka: %d records acknowledged (%d failed, not acknowledged)", len(kl.acks), kl.errs)
	verify(t, c, "stop-kafka", kl.acks)
	consumed.readAll(t, kl.acks, 60*time.Second)
}
