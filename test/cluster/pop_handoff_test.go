//go:build !race

package cluster_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterPOPHandOff: RocketMQ 5 sends acknowledged in the
// milliseconds before a group's leadership moves, with SimpleConsumer
// receives in flight, are every one delivered. Each group's leadership is
// moved to another member again and again under the load (and the leader
// balancer hands it back to its preferred member moments later: two
// hand-offs per move), then the preferred member of one group is SIGKILLed
// and restarted, which hands its group back to a member whose log was cut
// short. ROSETTA_CLUSTER_POP_HANDOFFS sets the number of moves (12),
// ROSETTA_CLUSTER_POP_KILLS the number of kills (1, each of the next
// group's preferred member).
func TestClusterPOPHandOff(t *testing.T) {
	quietRocketMQClients(t)
	c := newCluster(t, envGroups+"=0")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
	gl := startGRPCLoad(t, c, "pop-handoff", 8)
	progress := func(what string, n int) {
		t.Helper()
		want := gl.ackCount() + n
		apptest.Eventually(t, 60*time.Second, what, func() bool { return gl.ackCount() >= want })
	}
	progress("sends acknowledged", 50)
	moves := 12
	if n, err := strconv.Atoi(os.Getenv("ROSETTA_CLUSTER_POP_HANDOFFS")); err == nil && n > 0 {
		moves = n
	}
	moved := 0
	for i := range moves {
		g := i % 3
		from := 0
		apptest.Eventually(t, 30*time.Second, "a leader of the group", func() bool {
			st, ok := c.status(ctx)
			if ok && len(st.Groups) == 3 {
				from = int(st.Groups[g].Leader)
			}
			return from != 0
		})
		to := from%3 + 1
		path := "/api/v1/cluster/groups/" + strconv.Itoa(g) + "/leader"
		if code, err := c.adminTry(ctx, t, c.member(to), http.MethodPost, path, map[string]any{"node": to}, nil); err == nil && code < 300 {
			moved++
		}
		progress("sends acknowledged after a move", 10)
	}
	t.Logf("%d of %d leadership moves made", moved, moves)

	kills := 1
	if n, err := strconv.Atoi(os.Getenv("ROSETTA_CLUSTER_POP_KILLS")); err == nil && n > 0 {
		kills = n
	}
	for k := range kills {
		g := (k + 1) % 3
		victim := c.member(g + 1)
		c.kill(victim)
		apptest.Eventually(t, 30*time.Second, "the group led by another member", func() bool {
			st, ok := c.status(ctx)
			return ok && len(st.Groups) == 3 && st.Groups[g].Leader != 0 && int(st.Groups[g].Leader) != g+1
		})
		progress("sends acknowledged after the kill", 50)
		c.start(victim)
		c.wait(victim)
		apptest.Eventually(t, 60*time.Second, "the restarted member leads its group again", func() bool { return c.spread(ctx) })
		progress("sends acknowledged after the restart", 50)
	}
	gl.stop()
	gl.verify(t)
	late := c.countLogLines("term_ended=true")
	t.Logf("calls answered by a term's servers after the term ended, by member: %v", late)
	for id := range late {
		for _, l := range c.logLines(id, "term_ended=true", "no longer leading", "leading: serving") {
			t.Logf("member %d: %s", id, l)
		}
	}
}

// logLines returns member id's log lines holding any of parts.
func (c *cluster) logLines(id int, parts ...string) []string {
	b, err := os.ReadFile(c.logFile(&member{id: id}))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, p := range parts {
			if strings.Contains(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// countLogLines counts, per member, the log lines holding every one of
// parts.
func (c *cluster) countLogLines(parts ...string) map[int]int {
	out := map[int]int{}
	for id := 1; id <= len(hosts); id++ {
		b, err := os.ReadFile(c.logFile(&member{id: id}))
		if err != nil {
			continue
		}
	next:
		for _, line := range strings.Split(string(b), "\n") {
			for _, p := range parts {
				if !strings.Contains(line, p) {
					continue next
				}
			}
			out[id]++
		}
	}
	return out
}
