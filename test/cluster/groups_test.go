//go:build !race

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"testing"
	"time"

	rmqadmin "github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterGroups: three members holding three replication groups, each
// led by its preferred member (leaders spread). rocketmq-client-go sees
// three broker names and its sends reach all three; RocketMQ 5 clients'
// sends reach each group's leader. When the member leading a group is
// killed, another member takes the group over and the clients carry on
// (a sync send retries another broker); the member restarts, catches up
// and gets its group back. No acknowledged message is lost.
func TestClusterGroups(t *testing.T) {
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=3")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	spread := func() bool {
		st, ok := c.status(ctx)
		if !ok || len(st.Groups) != 3 {
			return false
		}
		for _, g := range st.Groups {
			if int(g.Leader) != int(g.ID)+1 {
				return false
			}
		}
		return true
	}
	start := time.Now()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", spread)
	t.Logf("leaders spread %v after the start", time.Since(start).Round(time.Millisecond))

	// A topic made through one broker has its queues in every group.
	adm, err := rmqadmin.NewAdmin(rmqadmin.WithResolver(primitive.NewPassthroughResolver(c.addrs(3))))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(ctx, rmqadmin.WithTopicCreate("groups-remoting"), rmqadmin.WithBrokerAddrCreate(c.addrs(3)[0]),
		rmqadmin.WithReadQueueNums(4), rmqadmin.WithWriteQueueNums(4)); err != nil {
		t.Fatal(err)
	}
	rl := startRemotingLoad(t, c, "groups-remoting")
	gl := startGRPCLoad(t, c, "groups-grpc")
	waitAcks := func(what string, n int) {
		t.Helper()
		start := time.Now()
		rn, gn := rl.ackCount()+n, gl.ackCount()+n/5
		apptest.Eventually(t, 60*time.Second, what, func() bool { return rl.ackCount() >= rn && gl.ackCount() >= gn })
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	}
	waitAcks("sends acknowledged", 150)

	mqs, err := adm.FetchPublishMessageQueues(ctx, "groups-remoting")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, q := range mqs {
		names[q.BrokerName]++
	}
	if len(names) != 3 || len(mqs) != 12 {
		t.Fatalf("rocketmq-client-go sees brokers %v, want three", names)
	}
	rl.mu.Lock()
	sentTo := fmt.Sprint(rl.brokers)
	reached := len(rl.brokers)
	rl.mu.Unlock()
	if reached != 3 {
		t.Fatalf("remoting sends reached brokers %s, want all three", sentTo)
	}
	gl.mu.Lock()
	grpcTo := fmt.Sprint(gl.brokers)
	reached = len(gl.brokers)
	gl.mu.Unlock()
	if reached != 3 {
		t.Fatalf("gRPC sends reached %s, want the three groups' leaders", grpcTo)
	}
	t.Logf("queues per broker %v; remoting sends by broker %s; gRPC sends by endpoint %s", names, sentTo, grpcTo)

	// The member leading group 1 dies: the others take the group over.
	victim := c.member(2)
	killed := time.Now()
	c.kill(victim)
	apptest.Eventually(t, 30*time.Second, "group 1 led by another member", func() bool {
		st, ok := c.status(ctx)
		return ok && len(st.Groups) == 3 && st.Groups[1].Leader != 0 && st.Groups[1].Leader != 2
	})
	t.Logf("group 1 led again %v after its leader's SIGKILL", time.Since(killed).Round(time.Millisecond))
	waitAcks("sends acknowledged after the kill", 150)

	c.start(victim)
	c.wait(victim)
	restarted := time.Now()
	apptest.Eventually(t, 60*time.Second, "the restarted member leads its group again", spread)
	t.Logf("the restarted member led its group again %v after its start", time.Since(restarted).Round(time.Millisecond))
	waitAcks("sends acknowledged after the restart", 150)
	rl.stop()
	gl.stop()
	rl.verify(t)
	gl.verify(t)
}

// status is the cluster as a live member's admin API shows it.
func (c *cluster) status(ctx context.Context) (admin.ClusterStatus, bool) {
	for _, m := range c.members {
		if m.cmd == nil {
			continue
		}
		var st admin.ClusterStatus
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(m.host, strconv.Itoa(c.ports[5]))+"/api/v1/cluster", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil {
			sort.Slice(st.Groups, func(i, j int) bool { return st.Groups[i].ID < st.Groups[j].ID })
			return st, true
		}
	}
	return admin.ClusterStatus{}, false
}
