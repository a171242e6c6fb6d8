//go:build !race

package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterSnapshot: a member is down while its groups' leaders delete
// the log it would need (retention, then garbage collection move every
// group's log start past what the member holds). Started again, it fetches
// an image of each group's engine from the leader, restarts to install it,
// catches up from the log after it, gets its group back, and serves every
// acknowledged record of its partitions from the installed copy. Then
// another member's disk is replaced (an empty directory): it joins again
// the same way.
func TestClusterSnapshot(t *testing.T) {
	c := newCluster(t, envGroups+"=0", envSmallSegments+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
	clog := &lockedBuffer{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.WithLogger(kgo.BasicLogger(clog, kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") })))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, 6, 3, map[string]*string{"retention.ms": new("1000")}, "snap-old"); err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	if resp, err := adm.CreateTopic(ctx, 6, 3, nil, "snap-kept"); err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	produce := func(topic string, from, n, size int) []ack {
		var acks []ack
		raw := make([]byte, size/2)
		for i := from; i < from+n; i += 500 {
			var recs []*kgo.Record
			for j := i; j < min(i+500, from+n); j++ {
				_, _ = rand.Read(raw) // incompressible
				recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(hex.EncodeToString(raw)), Value: []byte(fmt.Sprintf("s-%d", j))})
			}
			pctx, pcancel := context.WithTimeout(ctx, time.Minute)
			res := cl.ProduceSync(pctx, recs...)
			pcancel()
			if err := res.FirstErr(); err != nil {
				c.logStatuses(t)
				lines := strings.Split(clog.String(), "\n")
				t.Fatalf("produce to %s: %v; the client's last log lines:\n%s", topic, err, strings.Join(lines[max(0, len(lines)-60):], "\n"))
			}
			for _, r := range res {
				acks = append(acks, ack{partition: r.Record.Partition, offset: r.Record.Offset, value: string(r.Record.Value)})
			}
		}
		return acks
	}
	acks := produce("snap-kept", 0, 300, 100)

	victim := c.member(3)
	st, _ := c.status(ctx)
	held := map[int]uint64{}
	for _, g := range st.Groups {
		held[int(g.ID)] = uint64(g.CommitIndex)
	}
	c.kill(victim)
	// While it is down: a few MiB that retention then drops, more kept
	// records, and garbage collection of the segments left mostly dead.
	produce("snap-old", 0, 12000, 1000)
	acks = append(acks, produce("snap-kept", 300, 300, 100)...)
	time.Sleep(1500 * time.Millisecond)
	var ret, gc map[string]any
	if s := c.adminCall(ctx, t, http.MethodPost, "/api/v1/storage/retention", nil, &ret); s != http.StatusOK {
		t.Fatalf("retention pass: %d", s)
	}
	if s := c.adminCall(ctx, t, http.MethodPost, "/api/v1/storage/gc?threshold=1", nil, &gc); s != http.StatusOK {
		t.Fatalf("garbage collection: %d", s)
	}
	t.Logf("group 0's retention pass %v; garbage collection %v", ret, gc)
	gone := 0
	for _, m := range c.members[:2] {
		st, _ := c.statusFrom(ctx, m)
		for _, g := range st.Groups {
			if g.Role != "leader" {
				continue // a follower's own log, which it trims itself
			}
			t.Logf("group %d: its leader's log %d..%d; member 3 held up to %d", g.ID, g.FirstIndex, g.LastIndex, held[int(g.ID)])
			if uint64(g.FirstIndex) > held[int(g.ID)]+1 {
				gone++
			}
		}
	}
	if gone == 0 {
		t.Fatal("no group's log start moved past what the stopped member holds")
	}

	restarted := time.Now()
	c.start(victim)
	apptest.Eventually(t, 2*time.Minute, "the member back with its group", func() bool { return c.spread(ctx) })
	t.Logf("%d groups' logs were gone from the member's position: it led its group again %v after its start",
		gone, time.Since(restarted).Round(time.Millisecond))
	acks = append(acks, produce("snap-kept", 600, 300, 100)...)
	verify(t, c, "snap-kept", acks)

	// A member's disk is replaced: it starts with an empty directory,
	// joins the etcd cluster again, fetches every group's image and gets
	// its group back.
	replaced := c.member(2)
	c.kill(replaced)
	if err := os.RemoveAll(replaced.dir); err != nil {
		t.Fatal(err)
	}
	acks = append(acks, produce("snap-kept", 900, 300, 100)...)
	restarted = time.Now()
	c.start(replaced)
	apptest.Eventually(t, 2*time.Minute, "the replaced member back with its group", func() bool { return c.spread(ctx) })
	t.Logf("a member with a replaced disk led its group again %v after its start", time.Since(restarted).Round(time.Millisecond))
	acks = append(acks, produce("snap-kept", 1200, 300, 100)...)
	verify(t, c, "snap-kept", acks)

	// A fourth member joins: the groups' logs no longer start at 1, so
	// its replicas start from images, with the membership they carry.
	if code := c.adminCallAt(ctx, t, c.member(1), http.MethodPost, "/api/v1/cluster/members", map[string]any{"node": 4, "host": hosts[3]}, nil); code != http.StatusOK {
		t.Fatalf("add member 4: status %d", code)
	}
	joined := time.Now()
	c.startMember(4)
	apptest.Eventually(t, 2*time.Minute, "the groups placed over members 1–4", c.votersAre(ctx, 1, 2, 3, 4))
	t.Logf("a member joining from images voted in every group %v after its start", time.Since(joined).Round(time.Millisecond))
	acks = append(acks, produce("snap-kept", 1500, 300, 100)...)
	verify(t, c, "snap-kept", acks)
}
