//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// cpuHog keeps every core busy with child processes until the returned
// function stops them (a machine busy with other work).
func cpuHog(t *testing.T) func() {
	var cmds []*exec.Cmd
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	stop := func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		cmds = nil
	}
	t.Cleanup(stop)
	return stop
}

// logTime is the time of the first line of member id's log after since
// that holds every one of parts (zero if none).
func (c *cluster) logTime(id int, since time.Time, parts ...string) time.Time {
	for _, line := range c.logLines(id, parts[0]) {
		ok := true
		for _, p := range parts[1:] {
			ok = ok && strings.Contains(line, p)
		}
		if !ok {
			continue
		}
		ts, _, found := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !found {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err == nil && at.After(since) {
			return at
		}
	}
	return time.Time{}
}

// TestClusterFailoverBreakdown (not in CI): the leader of one replication
// group after another is SIGKILLed under idempotent producers, and the time
// to the next acknowledged produce on the group's partitions is split into
// its parts, read from the members' logs: failure detection (a survivor
// drops the dead leader), election (a survivor leads), the new term opening
// (its first entry committed), the term's broker built and serving, and the
// clients reaching it. ROSETTA_CLUSTER_FAILOVERS sets the kills (6);
// ROSETTA_CLUSTER_HOG=1 keeps every core busy meanwhile.
func TestClusterFailoverBreakdown(t *testing.T) {
	if os.Getenv("ROSETTA_CLUSTER_FAILOVERS") == "" {
		t.Skip("set ROSETTA_CLUSTER_FAILOVERS to run")
	}
	rounds, _ := strconv.Atoi(os.Getenv("ROSETTA_CLUSTER_FAILOVERS"))
	c := newCluster(t, envGroups+"=0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c.spreadTopic(ctx, t, "breakdown")
	l := startLoad(t, c, "breakdown", 2)
	apptest.Eventually(t, 30*time.Second, "records acknowledged", func() bool { return l.count() > 200 })
	if os.Getenv("ROSETTA_CLUSTER_HOG") != "" {
		cpuHog(t)
	}
	parts := map[string][]time.Duration{}
	var total []time.Duration
	for i := range rounds {
		g := i % 3
		victim := g + 1 // the preferred leader leads it again after each restart
		apptest.Eventually(t, 60*time.Second, "group g led by member g+1", func() bool { return c.spread(ctx) })
		time.Sleep(time.Second)
		killed := time.Now()
		c.kill(c.member(victim))
		ack := l.waitAckAfterIn(t, killed, 30*time.Second, func(p int32) bool { return int(p)%3 == g })
		total = append(total, ack)
		group := fmt.Sprintf("group=%d ", g)
		var detect, elect, open, serve time.Time
		newLeader := 0
		for id := 1; id <= 3; id++ {
			if id == victim {
				continue
			}
			if at := c.logTime(id, killed, "group leadership", group, "leader=0"); !at.IsZero() && (detect.IsZero() || at.Before(detect)) {
				detect = at
			}
			if at := c.logTime(id, killed, "leading: appends open", group); !at.IsZero() {
				open, newLeader = at, id
			}
		}
		if newLeader != 0 {
			elect = c.logTime(newLeader, killed, "group leadership", group, fmt.Sprintf("leader=%d ", newLeader))
			serve = c.logTime(newLeader, killed, "leading: serving clients", group)
		}
		stages := []struct {
			name string
			at   time.Time
		}{{"detect", detect}, {"elect", elect}, {"open", open}, {"serve", serve}, {"clients", killed.Add(ack)}}
		prev := killed
		var line []string
		for _, s := range stages {
			if s.at.IsZero() {
				line = append(line, s.name+"=?")
				continue
			}
			d := s.at.Sub(prev)
			parts[s.name] = append(parts[s.name], d)
			line = append(line, fmt.Sprintf("%s=%v", s.name, d.Round(time.Millisecond)))
			prev = s.at
		}
		t.Logf("group %d, leader %d SIGKILLed: next acknowledged produce after %v (%s)", g, victim, ack.Round(time.Millisecond), strings.Join(line, " "))
		c.start(c.member(victim))
		c.wait(c.member(victim))
	}
	l.stop()
	t.Logf("leader SIGKILL → next acknowledged produce on its partitions: %s", distribution(total))
	for _, name := range []string{"detect", "elect", "open", "serve", "clients"} {
		t.Logf("  %-8s %s", name, distribution(parts[name]))
	}
	verify(t, c, "breakdown", l.acks)
}
