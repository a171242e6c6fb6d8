// Package cluster_test runs three-node clusters of child processes on
// 127.0.0.11–13 and fails them as machines fail: SIGKILL of the leader and
// of a follower, and a network partition made with iptables rules on
// loopback between those addresses only.
//
// Diagnostics: ROSETTA_TEST_LOG=info (the members' logs),
// ROSETTA_CLUSTER_CLIENT_LOG=1 (the producers' franz-go logs) and
// ROSETTA_CLUSTER_DUMP=1 (goroutine dumps of the members when producing
// stalls). ROSETTA_CLUSTER_CHAOS=<kills> runs TestClusterChaos
// (scripts/chaos.sh).
package cluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

const (
	envDir     = "ROSETTA_CLUSTER_DIR"
	envNode    = "ROSETTA_CLUSTER_NODE"
	envPorts   = "ROSETTA_CLUSTER_PORTS" // kafka,etcd,raft,remoting,grpc,http,pulsar,mqtt
	envMembers = "ROSETTA_CLUSTER_MEMBERS"
	envEtcd    = "ROSETTA_CLUSTER_ETCD" // an external etcd instead of embedded members
	envGroups  = "ROSETTA_CLUSTER_GROUPS"
	// envBalanceQueues sets the members' cluster.balance_queues.
	envBalanceQueues = "ROSETTA_CLUSTER_BALANCE_QUEUES"
	envRole          = "ROSETTA_CLUSTER_ROLE" // cluster.roles
	envHost          = "ROSETTA_CLUSTER_HOST" // listen.host, instead of the member's
	// envSmallSegments: 1 MiB commit-log segments, so retention and
	// garbage collection have whole segments to delete.
	envSmallSegments = "ROSETTA_CLUSTER_SMALL_SEGMENTS"
	// envPulsar: the members (and protocol-only nodes) serve Pulsar
	// clients (on ports[6], group g's on the port + g).
	envPulsar = "ROSETTA_CLUSTER_PULSAR"
	// envMQTT: the members (and protocol-only nodes) serve MQTT clients
	// (on ports[7]; group 0's leader serves them, the others relay).
	envMQTT = "ROSETTA_CLUSTER_MQTT"
)

// hosts: the three members' addresses, and a fourth joining later.
var hosts = []string{"127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14", "127.0.0.15"}

// largeHosts: the members of a cluster larger than five (whose sixth and
// seventh are etcd clients).
var largeHosts = append(slices.Clone(hosts), "127.0.0.16", "127.0.0.17")

// protocolHosts: protocol-only nodes' addresses (node ids 21, 22).
var protocolHosts = []string{"127.0.0.21", "127.0.0.22"}

// protocolID is the first protocol-only node's id.
const protocolID = 21

// TestClusterChild runs one member for the tests below until it is killed.
func TestClusterChild(t *testing.T) {
	dir := os.Getenv(envDir)
	if dir == "" {
		t.Skip("run by the cluster tests")
	}
	id, _ := strconv.Atoi(os.Getenv(envNode))
	ports := strings.Split(os.Getenv(envPorts), ",")
	cfg := apptest.TestConfig(dir)
	cfg.NodeID = id
	cfg.Cluster.Members = os.Getenv(envMembers)
	cfg.Cluster.EtcdEndpoints = os.Getenv(envEtcd)
	cfg.Cluster.Secret = "test-secret"
	cfg.Cluster.TLS = true
	cfg.Cluster.EtcdPort, _ = strconv.Atoi(ports[1])
	cfg.Cluster.RaftPort, _ = strconv.Atoi(ports[2])
	if h := os.Getenv(envHost); h != "" {
		cfg.Listen.Host = h
	} else {
		cfg.Listen.Host = largeHosts[id-1]
	}
	cfg.Cluster.Roles = os.Getenv(envRole)
	cfg.Listen.Kafka = ":" + ports[0]
	cfg.Listen.Remoting, cfg.Listen.GRPC = ":"+ports[3], ":"+ports[4]
	cfg.Listen.HTTP, cfg.Listen.Pulsar, cfg.Listen.PulsarSSL = "", "", ""
	if os.Getenv(envPulsar) != "" {
		cfg.Listen.Pulsar = ":" + ports[6]
	}
	cfg.Listen.MQTT, cfg.Listen.MQTTSSL = "", ""
	if os.Getenv(envMQTT) != "" {
		cfg.Listen.MQTT = ":" + ports[7]
	}
	// One replication group unless the test asks for several (0: the
	// default, one per member).
	cfg.Cluster.Groups = 1
	if g, err := strconv.Atoi(os.Getenv(envGroups)); err == nil {
		cfg.Cluster.Groups = g
		cfg.Listen.HTTP = ":" + ports[5]
	}
	cfg.Storage.Durability = "sync"
	if d, err := time.ParseDuration(os.Getenv(envBalanceQueues)); err == nil {
		cfg.Cluster.BalanceQueues = d
	}
	if os.Getenv(envSmallSegments) != "" {
		cfg.Storage.SegmentSize, cfg.Storage.MaxRecordSize = 1<<20, 512<<10
	}
	tierChildConfig(&cfg, ports[5])
	cfg.Broker.GroupConsumerHeartbeatInterval = 250 * time.Millisecond
	cfg.Broker.GroupConsumerSessionTimeout = 6 * time.Second
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	n := apptest.StartTestNode(t, cfg)
	fmt.Printf("READY KAFKA_ADDR=%s\n", n.KafkaAddr())
	select {
	case <-term: // or SIGKILL
		n.Stop(t) // a graceful stop, as rosetta serve's on SIGTERM
		os.Exit(0)
	case err := <-n.Done():
		if errors.Is(err, app.ErrRestartToInstall) {
			// As rosetta serve does: the same process starts again.
			exe, _ := os.Executable()
			err = syscall.Exec(exe, os.Args, os.Environ())
		}
		fmt.Fprintln(os.Stderr, "member ended:", err)
		os.Exit(1)
	}
}

// member is one child process.
type member struct {
	id    int
	dir   string
	host  string
	cmd   *exec.Cmd
	addr  string
	ready chan string
}

type cluster struct {
	t       *testing.T
	ports   []int // kafka, etcd (and etcd+1), raft, remoting, grpc, http, pulsar (remoting, grpc and pulsar + g: group g's)
	members []*member
	// protocol are protocol-only nodes; with viaProtocol, RocketMQ loads
	// reach the cluster through them alone (clientAddrs).
	protocol    []*member
	viaProtocol bool
	env         []string // for every member
	root        string   // the members' directories are under it
}

// freePorts finds ports free on every host, below the ephemeral range
// (32768 and up), so no outgoing connection of a member can hold one
// when a restarted member binds it again. Each port is the first of
// portSpan (etcd's peer port, the groups' RocketMQ ports, up to portSpan
// groups), and no two ports' spans overlap: group 1's remoting port must
// not be another listener's.
func freePorts(t *testing.T, n int) []int {
	const portSpan = 8
	var out []int
	for len(out) < n {
		p := 20000 + rand.IntN(12000)
		ok := !slices.ContainsFunc(out, func(q int) bool { return p > q-portSpan && p < q+portSpan })
		for _, h := range slices.Concat(largeHosts, protocolHosts) {
			if !ok {
				break
			}
			for q := p; q < p+portSpan; q++ { // etcd's peer port, groups' RocketMQ ports
				l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(q)))
				if err != nil {
					ok = false
					break
				}
				l.Close()
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

func newCluster(t *testing.T, env ...string) *cluster { return newClusterOf(t, 3, env...) }

// newClusterOf starts a cluster of n members (up to seven) on
// largeHosts[:n].
func newClusterOf(t *testing.T, n int, env ...string) *cluster {
	for _, h := range largeHosts[:max(n, len(hosts))] {
		l, err := net.Listen("tcp", h+":0")
		if err != nil {
			t.Skipf("loopback address %s: %v", h, err)
		}
		l.Close()
	}
	c := &cluster{t: t, ports: freePorts(t, 8), env: env}
	root := t.TempDir()
	c.root = root
	for i, h := range largeHosts[:n] {
		c.members = append(c.members, &member{id: i + 1, dir: filepath.Join(root, fmt.Sprint("node", i+1)), host: h})
	}
	t.Cleanup(func() {
		for _, m := range append(c.members, c.protocol...) {
			c.kill(m)
		}
		if t.Failed() || os.Getenv("ROSETTA_CLUSTER_SHOW_LOGS") != "" {
			c.showLogs()
		}
	})
	for _, m := range c.members {
		c.start(m)
	}
	for _, m := range c.members {
		c.wait(m)
	}
	return c
}

func (c *cluster) membersFlag() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, fmt.Sprintf("%d=%s", m.id, m.host))
	}
	return strings.Join(parts, ",")
}

// start starts a member's process (it serves once a majority runs).
func (c *cluster) start(m *member) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterChild$", "-test.v=false")
	cmd.Env = append(os.Environ(), envDir+"="+m.dir, envNode+"="+strconv.Itoa(m.id),
		envPorts+"="+fmt.Sprintf("%d,%d,%d,%d,%d,%d,%d,%d", c.ports[0], c.ports[1], c.ports[2], c.ports[3], c.ports[4], c.ports[5], c.ports[6], c.ports[7]), envMembers+"="+c.membersFlag())
	cmd.Env = append(cmd.Env, apptest.EnvLogFile+"="+c.logFile(m))
	cmd.Env = append(cmd.Env, c.env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	// A test binary that dies (its timeout's panic skips every cleanup)
	// takes its members with it rather than leaving them on the hosts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	m.cmd, m.ready = cmd, make(chan string, 1)
	logPath := c.logFile(m)
	go func() {
		// What the child's test prints besides READY (why it failed to
		// start, say) goes to its log.
		var log *os.File
		defer func() {
			if log != nil {
				_ = log.Close()
			}
		}()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY KAFKA_ADDR="); ok {
				m.ready <- rest
				continue
			}
			if log == nil {
				if log, _ = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); log == nil {
					continue
				}
			}
			_, _ = fmt.Fprintf(log, "child output: %s\n", sc.Text())
		}
	}()
}

// logFile is where a member's processes append their log (beside, not
// in, its data directory: images replace that).
func (c *cluster) logFile(m *member) string {
	return filepath.Join(c.root, fmt.Sprintf("node%d.log", m.id))
}

// showLogLines bounds how much of each member's log a failed test shows.
const showLogLines = 400

// showLogs prints the end of every member's log (the members of a failed
// test, also those that left).
func (c *cluster) showLogs() {
	ids := []int{protocolID, protocolID + 1}
	for id := 1; id <= len(largeHosts); id++ {
		ids = append(ids, id)
	}
	for _, id := range ids {
		b, err := os.ReadFile(c.logFile(&member{id: id}))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > showLogLines {
			lines = lines[len(lines)-showLogLines:]
		}
		c.t.Logf("member %d's log (last %d lines):\n%s", id, len(lines), strings.Join(lines, "\n"))
	}
}

func (c *cluster) wait(m *member) {
	select {
	case m.addr = <-m.ready:
	case <-time.After(90 * time.Second):
		c.t.Fatalf("node %d did not start", m.id)
	}
}

func (c *cluster) kill(m *member) {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	_ = m.cmd.Wait()
	m.cmd = nil
}

// stop stops a member with SIGTERM (it hands leadership off first) and
// waits for it to exit.
func (c *cluster) stop(m *member) {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		c.t.Errorf("node %d did not exit within 30 s of SIGTERM", m.id)
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	m.cmd = nil
}

func (c *cluster) seeds() []string { return c.clientAddrs(0) }

// clientAddrs lists the addresses of the listener ports[i] clients are
// given: the protocol-only nodes' with viaProtocol, else the members'.
func (c *cluster) clientAddrs(i int) []string {
	if !c.viaProtocol {
		return c.addrs(i)
	}
	var s []string
	for _, m := range c.protocol {
		s = append(s, net.JoinHostPort(m.host, strconv.Itoa(c.ports[i])))
	}
	return s
}

// addrs lists every member's address of the listener ports[i].
func (c *cluster) addrs(i int) []string {
	var s []string
	for _, m := range c.members {
		s = append(s, net.JoinHostPort(m.host, strconv.Itoa(c.ports[i])))
	}
	return s
}

// leader asks the cluster which node leads (the controller); 0 if none
// answers.
func (c *cluster) leader(ctx context.Context) int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RequestRetries(0))
	if err != nil {
		return 0
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return 0
	}
	return int(md.Controller)
}

// waitLeader waits until the cluster names a leader.
func (c *cluster) waitLeader(ctx context.Context) int {
	c.t.Helper()
	var l int
	apptest.Eventually(c.t, 30*time.Second, "a leader", func() bool { l = c.leader(ctx); return l != 0 })
	return l
}

func (c *cluster) member(id int) *member { return c.members[id-1] }

// ack is one acknowledged record.
type ack struct {
	partition int32
	offset    int64
	value     string
	sent, at  time.Time
}

// load produces with idempotent producers (acks=all) until stopped,
// remembering what was acknowledged.
type load struct {
	c      *cluster
	mu     sync.Mutex
	acks   []ack
	errs   int
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// partitions the producers write to in turn (6 unless grown).
	partitions atomic.Int32
}

func startLoad(t *testing.T, c *cluster, topic string, producers int) *load {
	return startLoadOver(t, c, topic, producers, 6, "w")
}

// startLoadOver is startLoad over partitions partitions, its values named
// from prefix (loads of one topic have different prefixes).
func startLoadOver(t *testing.T, c *cluster, topic string, producers, partitions int, prefix string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{c: c, cancel: cancel}
	l.partitions.Store(int32(partitions))
	for w := 0; w < producers; w++ {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(2*time.Millisecond),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(250*time.Millisecond),
			kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }), clientLog(fmt.Sprint("producer", w)))
		if err != nil {
			t.Fatal(err)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer cl.Close()
			sem := make(chan struct{}, 32)
			for i := 0; ctx.Err() == nil; i++ {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					break
				}
				// About 2,000 records a second per producer: enough to
				// measure failover, little enough to verify quickly.
				time.Sleep(500 * time.Microsecond)
				v := fmt.Sprintf("%s%d-%07d", prefix, w, i)
				sent := time.Now()
				cl.Produce(context.Background(), &kgo.Record{Partition: int32(i) % l.partitions.Load(), Value: []byte(v)}, func(r *kgo.Record, err error) {
					<-sem
					l.mu.Lock()
					defer l.mu.Unlock()
					if err != nil {
						if l.errs++; l.errs <= 3 {
							t.Logf("%s not acknowledged: %v", v, err)
						}
						return
					}
					l.acks = append(l.acks, ack{r.Partition, r.Offset, string(r.Value), sent, time.Now()})
				})
			}
			fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cl.Flush(fctx)
		}()
	}
	return l
}

// clientLog logs a client's doings when ROSETTA_CLUSTER_CLIENT_LOG is set.
// clientLog logs a franz-go client to stderr when ROSETTA_CLUSTER_CLIENT_LOG
// names a level (debug, info, warn or error).
func clientLog(name string) kgo.Opt {
	var level kgo.LogLevel
	switch os.Getenv("ROSETTA_CLUSTER_CLIENT_LOG") {
	case "":
		return kgo.WithLogger(nil)
	case "info":
		level = kgo.LogLevelInfo
	case "warn":
		level = kgo.LogLevelWarn
	case "error":
		level = kgo.LogLevelError
	default:
		level = kgo.LogLevelDebug
	}
	return kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string { return time.Now().Format("15:04:05.000 ") + name + " " }))
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// waitAckAfter waits for a record sent after since to be acknowledged and
// returns how long after since that was.
func (l *load) waitAckAfter(t *testing.T, since time.Time, d time.Duration) time.Duration {
	t.Helper()
	return l.waitAckAfterIn(t, since, d, func(int32) bool { return true })
}

// waitAckAfterIn is waitAckAfter for the partitions in says.
func (l *load) waitAckAfterIn(t *testing.T, since time.Time, d time.Duration, in func(int32) bool) time.Duration {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		first := time.Time{}
		for i := len(l.acks) - 1; i >= 0 && l.acks[i].at.After(since); i-- {
			if a := l.acks[i]; a.sent.After(since) && in(a.partition) && (first.IsZero() || a.at.Before(first)) {
				first = a.at
			}
		}
		l.mu.Unlock()
		if !first.IsZero() {
			return first.Sub(since)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if os.Getenv("ROSETTA_CLUSTER_DUMP") != "" {
		for _, m := range l.c.members {
			if m.cmd != nil {
				_ = m.cmd.Process.Signal(syscall.SIGQUIT)
			}
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("no record sent after %v acknowledged within %v", since.Format(time.StampMilli), d)
	return 0
}

// TestClusterFailover: idempotent producers and a KIP-848 consumer group
// run against three members while the leader is killed, a follower is
// killed, and the leader is cut off from the others; afterwards every
// acknowledged record is in its partition exactly once and in order, and
// the cut-off side acknowledged nothing.
func TestClusterFailover(t *testing.T) {
	if os.Getenv(envDir) != "" {
		t.Skip("child")
	}
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	c.waitLeader(ctx)
	resp, err := adm.CreateTopic(ctx, 6, 3, nil, "orders")
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	if resp, err := adm.CreateTopic(ctx, 1, 4, nil, "too-many-replicas"); err == nil && resp.Err == nil {
		t.Error("a replication factor above the member count was accepted")
	}
	checkKcat(t, c, "orders")
	consumed := startGroupConsumer(t, c, "orders", "audit")
	l := startLoad(t, c, "orders", 2)
	apptest.Eventually(t, 30*time.Second, "records acknowledged", func() bool { return l.count() > 200 })

	// 1. SIGKILL the leader.
	lead := c.waitLeader(ctx)
	killedAt := time.Now()
	c.kill(c.member(lead))
	fo := l.waitAckAfter(t, killedAt, 20*time.Second)
	newLead := c.waitLeader(ctx)
	t.Logf("failover after SIGKILL of leader node %d: next acknowledged produce after %v (node %d leads)", lead, fo.Round(time.Millisecond), newLead)
	c.start(c.member(lead))
	c.wait(c.member(lead))

	// 2. SIGKILL a follower.
	lead = c.waitLeader(ctx)
	follower := lead%3 + 1
	killedAt = time.Now()
	c.kill(c.member(follower))
	t.Logf("follower node %d killed: next acknowledged produce after %v", follower, l.waitAckAfter(t, killedAt, 20*time.Second).Round(time.Millisecond))
	c.start(c.member(follower))
	c.wait(c.member(follower))

	// 3. Cut the leader off from the other two.
	lead = c.waitLeader(ctx)
	if cut := partition(t, c.member(lead).host, otherHosts(c.member(lead).host)); cut != nil {
		cutAt := time.Now()
		minority := minorityProducer(t, c, c.member(lead), kgo.AllISRAcks())
		minorityLeaderAck := minorityProducer(t, c, c.member(lead), kgo.LeaderAck())
		// Clients that reach the cut-off node wait there until their
		// request times out (10 s) and then try another member.
		t.Logf("leader node %d cut off: next acknowledged produce after %v", lead, l.waitAckAfter(t, cutAt, 45*time.Second).Round(time.Millisecond))
		time.Sleep(2 * time.Second)
		if n := minority.stop(); n > 0 {
			t.Errorf("the cut-off node acknowledged %d records", n)
		}
		if n := minorityLeaderAck.stop(); n > 0 {
			t.Errorf("the cut-off node acknowledged %d acks=1 records (acks=1 waits for the commit)", n)
		}
		cut()
	}
	time.Sleep(2 * time.Second)

	// 4. SIGTERM the leader: it hands leadership off and exits.
	lead = c.waitLeader(ctx)
	stopAt := time.Now()
	exited := make(chan struct{})
	m := c.member(lead)
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	go func() { _ = m.cmd.Wait(); close(exited) }()
	fo = l.waitAckAfter(t, stopAt, 20*time.Second)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("node %d did not exit within 30 s of SIGTERM", lead)
	}
	t.Logf("leader node %d stopped with SIGTERM: exited after %v, next acknowledged produce after %v",
		lead, time.Since(stopAt).Round(time.Millisecond), fo.Round(time.Millisecond))
	m.cmd = nil
	c.start(m)
	c.wait(m)
	c.waitLeader(ctx)
	l.stop()
	if os.Getenv("ROSETTA_CLUSTER_DUMP") != "" && l.errs > 0 {
		lead := c.waitLeader(ctx)
		t.Logf("dumping leader %d", lead)
		_ = c.member(lead).cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(2 * time.Second)
	}
	t.Logf("acknowledged %d records (%d failed and were not acknowledged)", len(l.acks), l.errs)
	verify(t, c, "orders", l.acks)
	// The group consumer reaches every acknowledged record.
	consumed.readAll(t, l.acks, 60*time.Second)
	preferredElection(t, c, adm)
}

// preferredElection: a preferred leader election (kadm's ElectLeaders, as
// kafka-leader-election runs it) moves leadership back to node 1, the first
// replica, once it is in sync.
func preferredElection(t *testing.T, c *cluster, adm *kadm.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c.waitLeader(ctx) == 1 {
		c.stop(c.member(1)) // hands leadership off
		c.start(c.member(1))
		c.wait(c.member(1))
	}
	apptest.Eventually(t, 30*time.Second, "a preferred leader election to move leadership to node 1", func() bool {
		res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"orders": {0: {}, 1: {}}})
		if err != nil {
			return false
		}
		ok := true
		for _, ps := range res {
			for _, r := range ps {
				ok = ok && (r.Err == nil || errors.Is(r.Err, kerr.ElectionNotNeeded))
			}
		}
		return ok && c.leader(ctx) == 1
	})
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"orders": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range res {
		for _, r := range ps {
			if !errors.Is(r.Err, kerr.ElectionNotNeeded) {
				t.Errorf("a second preferred election: %v, want ELECTION_NOT_NEEDED", r.Err)
			}
		}
	}
	t.Logf("preferred leader election moved leadership to node 1")
}

// checkKcat lists the cluster with kcat (librdkafka): three brokers, the
// topic's partitions on all three.
func checkKcat(t *testing.T, c *cluster, topic string) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Log("kcat not installed: skipping its listing")
		return
	}
	out, err := exec.Command("kcat", "-b", strings.Join(c.seeds(), ","), "-L", "-t", topic).CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -L: %v\n%s", err, out)
	}
	for _, want := range []string{" 3 brokers:", "replicas: 1,2,3"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("kcat -L does not show %q:\n%s", want, out)
		}
	}
}

func otherHosts(h string) []string {
	var out []string
	for _, o := range hosts {
		if o != h {
			out = append(out, o)
		}
	}
	return out
}

// verify reads every partition from the start and checks that each
// acknowledged record is at its offset, that no value appears twice, and
// that each producer's records are in order within a partition.
func verify(t *testing.T, c *cluster, topic string, acks []ack) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ends kadm.ListedOffsets
	apptest.Eventually(t, 30*time.Second, "the end offsets", func() bool {
		ends, err = adm.ListEndOffsets(ctx, topic)
		return err == nil && ends.Error() == nil
	})
	want := 0
	ends.Each(func(o kadm.ListedOffset) { want += int(o.Offset) })
	byPos := map[[2]int64]string{}
	seen := map[string]int{}
	where := map[string][]string{} // value → partition/offset (leader epoch) of each copy
	last := map[string]int{}       // partition/producer → last sequence
	for len(byPos) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(byPos), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			byPos[[2]int64{int64(r.Partition), r.Offset}] = v
			seen[v]++
			where[v] = append(where[v], fmt.Sprintf("%d/%d (epoch %d)", r.Partition, r.Offset, r.LeaderEpoch))
			w, seq, _ := strings.Cut(v, "-")
			n, _ := strconv.Atoi(seq)
			k := fmt.Sprintf("%d/%s", r.Partition, w)
			if p, ok := last[k]; ok && n <= p {
				t.Errorf("partition %d: %s after sequence %d (out of order)", r.Partition, v, p)
			}
			last[k] = n
		})
	}
	for v, n := range seen {
		if n > 1 {
			t.Errorf("%s stored %d times, at %v", v, n, where[v])
		}
	}
	for _, a := range acks {
		if got := byPos[[2]int64{int64(a.partition), a.offset}]; got != a.value {
			t.Errorf("acknowledged %s at %d/%d, found %q", a.value, a.partition, a.offset, got)
		}
	}
	t.Logf("verified %d stored records, %d acknowledged", len(byPos), len(acks))
}

// groupConsumer is a KIP-848 group member remembering what it read.
type groupConsumer struct {
	mu     sync.Mutex
	values map[string]bool
	cancel context.CancelFunc
	done   chan struct{}
}

func startGroupConsumer(t *testing.T, c *cluster, topic, group string) *groupConsumer {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(200*time.Millisecond), clientLog("consumer"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupConsumer{values: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			g.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { g.values[string(r.Value)] = true })
			g.mu.Unlock()
		}
	}()
	return g
}

func (g *groupConsumer) covers(acks []ack) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range acks {
		if !g.values[a.value] {
			return false
		}
	}
	return true
}

// missing counts the acknowledged records not read, by partition.
func (g *groupConsumer) missing(acks []ack) map[int32]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[int32]int{}
	for _, a := range acks {
		if !g.values[a.value] {
			out[a.partition]++
		}
	}
	return out
}

// readAll waits up to d for the group to have read every acknowledged
// record (failing the test with what is missing), then stops it.
func (g *groupConsumer) readAll(t *testing.T, acks []ack, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !g.covers(acks) {
		if time.Now().After(deadline) {
			t.Fatalf("the consumer group did not read every acknowledged record: missing by partition %v", g.missing(acks))
		}
		time.Sleep(100 * time.Millisecond)
	}
	g.stop()
}

func (g *groupConsumer) stop() {
	g.cancel()
	<-g.done
}

// minority produces through one node only (its own connections, nothing
// else reachable) and counts what it gets acknowledged.
type minority struct {
	acked  int
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func minorityProducer(t *testing.T, c *cluster, m *member, acks kgo.Acks) *minority {
	only := net.JoinHostPort(m.host, strconv.Itoa(c.ports[0]))
	d := &net.Dialer{Timeout: time.Second}
	cl, err := kgo.NewClient(kgo.SeedBrokers(only), kgo.DefaultProduceTopic("orders"),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			if host != only {
				return nil, fmt.Errorf("only %s is reachable", only)
			}
			return d.DialContext(ctx, network, host)
		}), kgo.RecordDeliveryTimeout(time.Second), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(acks))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mp := &minority{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(mp.done)
		defer cl.Close()
		for i := 0; ctx.Err() == nil; i++ {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			err := cl.ProduceSync(rctx, &kgo.Record{Value: []byte(fmt.Sprintf("minority-%d", i))}).FirstErr()
			rcancel()
			if err == nil {
				mp.mu.Lock()
				mp.acked++
				mp.mu.Unlock()
			}
		}
	}()
	return mp
}

func (m *minority) stop() int {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acked
}

// partition drops traffic between host and others in both directions with
// iptables rules, and returns what deletes exactly those rules (nil when
// iptables is unusable here: the partition step is skipped).
func partition(t *testing.T, host string, others []string) func() {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil || os.Geteuid() != 0 {
		t.Logf("skipping the network partition: iptables needs root and the iptables package")
		return nil
	}
	var rules [][]string
	for _, o := range others {
		rules = append(rules, []string{"INPUT", "-s", host, "-d", o, "-j", "DROP"}, []string{"INPUT", "-s", o, "-d", host, "-j", "DROP"})
	}
	var added [][]string
	remove := func() {
		for _, r := range added {
			if out, err := exec.Command("iptables", append([]string{"-D"}, r...)...).CombinedOutput(); err != nil {
				t.Errorf("iptables -D %v: %v %s", r, err, out)
			}
		}
		added = nil
	}
	t.Cleanup(remove)
	for _, r := range rules {
		if out, err := exec.Command("iptables", append([]string{"-I"}, r...)...).CombinedOutput(); err != nil {
			remove()
			t.Logf("skipping the network partition: iptables -I %v: %v %s", r, err, out)
			return nil
		}
		added = append(added, r)
	}
	sort.Strings(others)
	t.Logf("partitioned %s from %v", host, others)
	return remove
}

// distribution summarises durations: count, p50, p90, max.
func distribution(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))].Round(time.Millisecond) }
	return fmt.Sprintf("n=%d p50=%v p90=%v max=%v", len(s), at(0.5), at(0.9), s[len(s)-1].Round(time.Millisecond))
}

// TestClusterExternalEtcd: members keep their metadata in an external etcd
// (Debian's etcd-server, an older version than the client) and replicate
// the log among themselves in a group each (the default); records
// acknowledged before and after the SIGKILL of group 0's leader (the
// controller) are all there.
func TestClusterExternalEtcd(t *testing.T) {
	if os.Getenv(envDir) != "" {
		t.Skip("child")
	}
	const bin = "/usr/bin/etcd"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("etcd-server not installed (scripts/test.sh installs it)")
		}
		t.Skip("etcd-server not installed")
	}
	ports := freePorts(t, 1)
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]+1)
	etcd := exec.Command(bin, "--name", "ext", "--data-dir", t.TempDir(), "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "ext="+peer, "--log-level", "error")
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Process.Kill(); _ = etcd.Wait() })
	c := newCluster(t, envEtcd+"="+client, envGroups+"=0") // the default: a group per member
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.waitLeader(ctx)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic("ext"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var acks []ack
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			r := &kgo.Record{Value: []byte(fmt.Sprintf("w0-%07d", i))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
			acks = append(acks, ack{partition: r.Partition, offset: r.Offset, value: string(r.Value)})
		}
	}
	produce(0, 300)
	c.kill(c.member(c.waitLeader(ctx)))
	produce(300, 300)
	verify(t, c, "ext", acks)
}
