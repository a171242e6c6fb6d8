//go:build !race

// The RocketMQ 5 client applies settings without a lock while its own
// settings sync reads them (a data race of the client's), so the chaos run,
// which drives it, is left out of race-detector builds.

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterChaos (ROSETTA_CLUSTER_CHAOS=<events>, outside the default
// run; scripts/chaos.sh): every client kind works against three members
// while they fail one after another — SIGKILLs of leaders and followers,
// partitions isolating the leader, graceful stops and rolling restarts —
// and afterwards nothing acknowledged is lost:
//
//   - franz-go idempotent producers (acks=all): every acknowledged record
//     stored exactly once, at its offset, in order per producer;
//   - a franz-go transactional producer: committed transactions visible
//     exactly once to read_committed readers, aborted ones never, and
//     every transaction all or nothing;
//   - a KIP-848 consumer group committing offsets: committed offsets never
//     move backwards, and the group reads every acknowledged record;
//   - rocketmq-client-go: sync sends with retries and a push consumer that
//     receives every acknowledged message;
//   - the RocketMQ 5 client: sends and a SimpleConsumer that receives and
//     acknowledges every acknowledged message.
//
// It prints the Kafka failover times (kill to the next acknowledged
// produce).
func TestClusterChaos(t *testing.T) {
	events, _ := strconv.Atoi(os.Getenv("ROSETTA_CLUSTER_CHAOS"))
	if events <= 0 || os.Getenv(envDir) != "" {
		t.Skip("set ROSETTA_CLUSTER_CHAOS to the number of failures")
	}
	quietRocketMQClients(t)
	c := newCluster(t)
	ctx := context.Background()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	c.waitLeader(ctx)
	for _, topic := range []string{"chaos", "chaos-txn", "chaos-rmq", "chaos-grpc"} {
		if resp, err := adm.CreateTopic(ctx, 6, 3, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	consumed := startGroupConsumer(t, c, "chaos", "chaos-audit")
	offsets := watchCommits(t, c, "chaos-audit")
	l := startLoad(t, c, "chaos", 2)
	txns := startTxnLoad(t, c, "chaos-txn")
	remoting := startRemotingLoad(t, c, "chaos-rmq")
	grpc := startGRPCLoad(t, c, "chaos-grpc", 1)
	apptest.Eventually(t, 30*time.Second, "records acknowledged", func() bool { return l.count() > 200 })

	var leaderTimes, followerTimes, partitionTimes, stopTimes []time.Duration
	for i := 0; i < events; i++ {
		lead := c.waitLeader(ctx)
		at := time.Now()
		switch kind := i % 8; {
		case kind == 2 || kind == 7: // a follower
			victim := lead%3 + 1
			c.kill(c.member(victim))
			d := l.waitAckAfter(t, at, 30*time.Second)
			followerTimes = append(followerTimes, d)
			t.Logf("event %d: SIGKILL of follower node %d: next acknowledged produce after %v", i+1, victim, d.Round(time.Millisecond))
			c.start(c.member(victim))
			c.wait(c.member(victim))
		case kind == 3: // the leader cut off
			cut := partition(t, c.member(lead).host, otherHosts(c.member(lead).host))
			if cut == nil {
				continue
			}
			at = time.Now() // the rules are in place
			d := l.waitAckAfter(t, at, 45*time.Second)
			partitionTimes = append(partitionTimes, d)
			t.Logf("event %d: leader node %d cut off: next acknowledged produce after %v", i+1, lead, d.Round(time.Millisecond))
			time.Sleep(2 * time.Second)
			cut()
		case kind == 5: // a graceful stop of the leader, or a rolling restart
			if i%16 == 13 {
				t.Logf("event %d: rolling restart", i+1)
				for _, m := range c.members {
					stopAt := time.Now()
					c.stop(m)
					d := l.waitAckAfter(t, stopAt, 30*time.Second)
					stopTimes = append(stopTimes, d)
					c.start(m)
					c.wait(m)
					time.Sleep(time.Second)
				}
				continue
			}
			c.stop(c.member(lead))
			d := l.waitAckAfter(t, at, 30*time.Second)
			stopTimes = append(stopTimes, d)
			t.Logf("event %d: SIGTERM of leader node %d: next acknowledged produce after %v", i+1, lead, d.Round(time.Millisecond))
			c.start(c.member(lead))
			c.wait(c.member(lead))
		default: // the leader
			c.kill(c.member(lead))
			d := l.waitAckAfter(t, at, 30*time.Second)
			leaderTimes = append(leaderTimes, d)
			t.Logf("event %d: SIGKILL of leader node %d: next acknowledged produce after %v", i+1, lead, d.Round(time.Millisecond))
			c.start(c.member(lead))
			c.wait(c.member(lead))
		}
		time.Sleep(time.Second)
	}
	c.waitLeader(ctx)
	l.stop()
	txns.stop()
	remoting.stop()
	grpc.stop()
	t.Logf("leader SIGKILLs: %s", distribution(leaderTimes))
	t.Logf("follower SIGKILLs: %s", distribution(followerTimes))
	t.Logf("leader partitioned: %s", distribution(partitionTimes))
	t.Logf("graceful stops: %s", distribution(stopTimes))
	t.Logf("kafka idempotent: acknowledged %d records (%d failed)", len(l.acks), l.errs)
	verify(t, c, "chaos", l.acks)
	txns.verify(t, c)
	consumed.readAll(t, l.acks, 90*time.Second)
	offsets.stop(t, true) // a franz-go group
	remoting.verify(t)
	grpc.verify(t)
}

// quietRocketMQClients keeps the RocketMQ clients' logs out of the output
// and out of $HOME; the test prints the RocketMQ 5 client's lines about
// sends it gave up, if any (they name the endpoints it tried).
func quietRocketMQClients(t *testing.T) {
	rlog.SetLogLevel("error")
	dir := t.TempDir()
	t.Setenv("rocketmq.client.logRoot", dir)
	t.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	t.Cleanup(func() {
		b, err := os.ReadFile(filepath.Join(dir, "rocketmq_client_go.log"))
		if err != nil {
			return
		}
		n := 0
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "failed to send message(s) finally") && n < 30 {
				t.Log("RocketMQ 5 client: " + strings.TrimSpace(line))
				n++
			}
		}
	})
}

// values is a set of message bodies with a count of each.
type values map[string]int

func (v values) missing(want []string) []string {
	var out []string
	for _, s := range want {
		if v[s] == 0 {
			out = append(out, s)
		}
	}
	return out
}

// firstFew shortens a list for a message.
func firstFew(s []string) string {
	if len(s) > 5 {
		return strings.Join(s[:5], ", ") + fmt.Sprintf(" and %d more", len(s)-5)
	}
	return strings.Join(s, ", ")
}
