package replication

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// memNet connects groups in one process, through marshalled messages, and
// can cut nodes off.
type memNet struct {
	mu     sync.Mutex
	groups map[model.NodeID]*Group
	cut    map[model.NodeID]bool
}

func (n *memNet) transport(from model.NodeID) Transport { return memTransport{n, from} }

type memTransport struct {
	net  *memNet
	from model.NodeID
}

func (t memTransport) Send(_ model.GroupID, msgs []*pb.Message) {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	if t.net.cut[t.from] {
		return
	}
	for _, m := range msgs {
		to := model.NodeID(m.GetTo())
		g := t.net.groups[to]
		if g == nil || t.net.cut[to] {
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		var c pb.Message
		if err := proto.Unmarshal(b, &c); err != nil {
			panic(err)
		}
		g.Deliver(&c)
	}
}

func (n *memNet) setCut(id model.NodeID, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[id] = cut
}

// replica is one node of a test cluster.
type replica struct {
	id     model.NodeID
	dir    string
	engine *storage.Engine
	group  *Group
	tcp    *TCPTransport
	// joined: the membership a node added later starts with.
	joined *Membership
}

type testCluster struct {
	t     *testing.T
	net   *memNet
	nodes map[model.NodeID]*replica
	ids   []model.NodeID
	// tcp: nodes talk over TCPTransport on loopback (addrs), not memNet;
	// tls: over TLS.
	tcp, tls bool
	addrs    map[model.NodeID]string
	// electionTicks: the nodes' election timeout in 10 ms ticks (30).
	electionTicks int
	// bucket, when set, tiers the nodes' sealed segments to it (64 KiB
	// segments, uploads only when a test asks).
	bucket tier.Bucket
	// free, when set, is each node's free disk space as its disk guard
	// sees it (a 1 TiB disk), with minFree kept free.
	free    func(model.NodeID) int64
	minFree int64
}

func newTestCluster(t *testing.T, n int) *testCluster { return newCluster(t, n, false) }

func newCluster(t *testing.T, n int, tcp bool) *testCluster {
	return newClusterFrom(&testCluster{t: t, net: &memNet{groups: map[model.NodeID]*Group{}, cut: map[model.NodeID]bool{}},
		nodes: map[model.NodeID]*replica{}, tcp: tcp, addrs: map[model.NodeID]string{}}, n)
}

// newClusterFrom starts n nodes of c.
func newClusterFrom(c *testCluster, n int) *testCluster {
	t := c.t
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, model.NodeID(i))
	}
	if c.tcp {
		for _, id := range c.ids {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			c.addrs[id] = l.Addr().String()
			l.Close()
		}
	}
	for _, id := range c.ids {
		c.nodes[id] = &replica{id: id, dir: filepath.Join(t.TempDir(), fmt.Sprint("node", id))}
		c.start(id)
	}
	t.Cleanup(func() {
		for _, id := range c.ids {
			c.stop(id)
		}
	})
	return c
}

func testLogger() *slog.Logger {
	if os.Getenv("REPLICATION_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func (c *testCluster) start(id model.NodeID) {
	r := c.nodes[id]
	h := NewHandoff()
	cfg := storage.DefaultConfig(r.dir)
	cfg.SegmentSize = 256 << 10
	cfg.MaxRecordSize = 64 << 10
	cfg.MinFreeBytes, cfg.MinFreeRatio = 0, 0
	cfg.CheckpointInterval = 200 * time.Millisecond
	cfg.Durability = storage.DurabilitySync
	cfg.NodeID = id
	cfg.Replicated = true
	cfg.OnWritten = h.Written
	cfg.Logger = testLogger()
	if c.free != nil {
		cfg.MinFreeBytes = c.minFree
		cfg.StatDisk = func() (int64, int64, error) { return 1 << 40, c.free(id), nil }
	}
	if c.bucket != nil {
		cfg.SegmentSize = 64 << 10
		cfg.MaxRecordSize = 16 << 10
		cfg.GCMinorInterval, cfg.GCMajorInterval = -1, -1
		cfg.Tier = &storage.TierConfig{Bucket: c.bucket, KeyPrefix: "g1/", UploadInterval: time.Hour}
	}
	e, err := storage.Open(cfg)
	if err != nil {
		c.t.Fatalf("open node %d: %v", id, err)
	}
	var tr Transport = c.net.transport(id)
	if c.tcp {
		tt, err := NewTCPTransport(TCPConfig{Cluster: "test", Node: id, Listen: c.addrs[id], Peers: c.addrs, Secret: "shared",
			TLS: c.tls, Logger: testLogger().With("node", id)})
		if err != nil {
			c.t.Fatalf("transport of node %d: %v", id, err)
		}
		r.tcp, tr = tt, tt
	}
	voters, learners := c.ids, []model.NodeID(nil)
	if r.joined != nil {
		voters, learners = r.joined.Voters, r.joined.Learners
	}
	g, err := Start(Config{Node: id, Voters: voters, Learners: learners, Dir: filepath.Join(r.dir, "raft"), Engine: e, Handoff: h,
		Transport: tr, Tick: 10 * time.Millisecond, ElectionTicks: cmp.Or(c.electionTicks, 30), Logger: testLogger().With("node", id)})
	if err != nil {
		c.t.Fatalf("start node %d: %v", id, err)
	}
	if r.tcp != nil {
		r.tcp.Register(g)
	}
	r.engine, r.group = e, g
	c.net.mu.Lock()
	c.net.groups[id] = g
	c.net.mu.Unlock()
}

// stop stops a node as a crash would for its process (the engine's log
// keeps what was written).
func (c *testCluster) stop(id model.NodeID) {
	r := c.nodes[id]
	if r.group == nil {
		return
	}
	c.net.mu.Lock()
	delete(c.net.groups, id)
	c.net.mu.Unlock()
	if r.tcp != nil {
		r.tcp.Close()
		r.tcp = nil
	}
	r.group.Stop()
	if err := r.group.Err(); err != nil {
		c.t.Errorf("node %d: %v", id, err)
	}
	r.engine.Close()
	r.group, r.engine = nil, nil
}

// leader waits for a leader all live nodes but excluded agree on, with
// its engine open for appends.
func (c *testCluster) leader(excluded ...model.NodeID) *replica {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var lead model.NodeID
		agree := true
		for _, id := range c.ids {
			r := c.nodes[id]
			if r.group == nil || contains(excluded, id) {
				continue
			}
			l, _ := r.group.Leader()
			if l == 0 || (lead != 0 && l != lead) || contains(excluded, l) {
				agree = false
				break
			}
			lead = l
		}
		if agree && lead != 0 {
			// Appends open once the new term's entry is stored.
			if r := c.nodes[lead]; r.group.Writable() {
				if err := r.engine.CreateQueue(context.Background(), 1); err == nil {
					return r
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader elected")
	return nil
}

func contains(ids []model.NodeID, id model.NodeID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// produce appends n messages to queue 1 on r and returns their payloads.
func produce(t *testing.T, r *replica, from, n int) []string {
	t.Helper()
	var out []string
	for i := from; i < from+n; i++ {
		p := fmt.Sprintf("m%05d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.engine.Append(ctx, []*storage.Record{{Queue: 1, Count: 1, Payload: []byte(p)}})
		cancel()
		if err != nil {
			t.Fatalf("append %s on node %d: %v", p, r.id, err)
		}
		out = append(out, p)
	}
	return out
}

// read returns the payloads of queue 1 visible on r.
func read(t *testing.T, r *replica) []string {
	t.Helper()
	var out []string
	off := model.QueueOffset(0)
	for {
		res, err := r.engine.Read(1, off, storage.ReadOptions{MaxBytes: 1 << 20})
		if errors.Is(err, model.ErrUnknownQueue) {
			return nil
		}
		if err != nil {
			t.Fatalf("read node %d: %v", r.id, err)
		}
		if len(res.Records) == 0 {
			res.Release()
			return out
		}
		for _, rec := range res.Records {
			out = append(out, string(rec.Payload))
		}
		off = res.NextOffset
		res.Release()
	}
}

// converge waits until every live node shows want.
func (c *testCluster) converge(want []string) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		var bad model.NodeID
		var got []string
		for _, id := range c.ids {
			r := c.nodes[id]
			if r.group == nil {
				continue
			}
			if got = read(c.t, r); !equal(got, want) {
				ok, bad = false, id
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d shows %d messages, want %d (first difference at %d)", bad, len(got), len(want), firstDiff(got, want))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// sameLogs checks that the live nodes hold identical records up to the
// smallest commit index.
func (c *testCluster) sameLogs() {
	c.t.Helper()
	var ref []byte
	var refNode model.NodeID
	upTo := model.Index(1<<63 - 1)
	for _, id := range c.ids {
		if r := c.nodes[id]; r.group != nil {
			upTo = min(upTo, r.engine.CommitIndex())
		}
	}
	for _, id := range c.ids {
		r := c.nodes[id]
		if r.group == nil {
			continue
		}
		var all []byte
		for i := model.Index(1); i <= upTo; {
			ents, err := r.engine.Entries(i, upTo+1, 1<<20)
			if err != nil {
				c.t.Fatalf("node %d entries from %d: %v", id, i, err)
			}
			for _, e := range ents {
				all = append(all, e.Data...)
			}
			i += model.Index(len(ents))
		}
		if ref == nil {
			ref, refNode = all, id
		} else if !bytes.Equal(ref, all) {
			c.t.Fatalf("logs of nodes %d and %d differ below index %d", refNode, id, upTo)
		}
	}
}

func TestReplicateAndFailover(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	want := produce(t, l, 0, 50)
	c.converge(want)
	c.sameLogs()

	// The leader goes away: another takes over and keeps every message.
	c.stop(l.id)
	l2 := c.leader(l.id)
	if l2.id == l.id {
		t.Fatal("stopped node still leads")
	}
	want = append(want, produce(t, l2, 50, 50)...)
	c.converge(want)

	// It comes back as a follower and catches up.
	c.start(l.id)
	want = append(want, produce(t, c.leader(), 100, 10)...)
	c.converge(want)
	c.sameLogs()
}

// TestInSync: the leader lists every voter in sync while they answer, and
// drops one it has not heard from within the failure-detection time even
// though its log held everything when it went quiet.
func TestInSync(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	c.converge(produce(t, l, 0, 10))
	insync := func() []model.NodeID { return l.group.Status().InSync() }
	waitUntil(t, 10*time.Second, "every voter in sync", func() bool { return len(insync()) == 3 })
	var quiet model.NodeID
	for _, id := range c.ids {
		if id != l.id {
			quiet = id
			break
		}
	}
	c.net.setCut(quiet, true)
	waitUntil(t, 10*time.Second, "the cut voter out of sync", func() bool {
		return len(insync()) == 2 && !slices.Contains(insync(), quiet)
	})
	c.net.setCut(quiet, false)
	waitUntil(t, 10*time.Second, "the voter back in sync", func() bool { return len(insync()) == 3 })
}

func TestMinorityLeaderIsCut(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	want := produce(t, l, 0, 20)
	c.converge(want)

	// Cut the leader off: what it writes now is never acknowledged.
	c.net.setCut(l.id, true)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := l.engine.Append(ctx, []*storage.Record{{Queue: 1, Count: 1, Payload: []byte("lost")}})
	cancel()
	if err == nil {
		t.Fatal("a leader cut off from the majority acknowledged an append")
	}
	l2 := c.leader(l.id)
	want = append(want, produce(t, l2, 20, 20)...)

	// Healed, the old leader drops its unacknowledged record and follows.
	c.net.setCut(l.id, false)
	c.converge(want)
	c.sameLogs()
}

func TestRestartAll(t *testing.T) {
	c := newTestCluster(t, 3)
	want := produce(t, c.leader(), 0, 30)
	c.converge(want)
	for _, id := range c.ids {
		c.stop(id)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	want = append(want, produce(t, c.leader(), 30, 10)...)
	c.converge(want)
	c.sameLogs()
}

func TestOverTCP(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprint("tls=", tlsOn), func(t *testing.T) {
			c := newCluster(t, 3, true)
			c.tls = tlsOn
			for _, id := range c.ids { // again, with TLS as asked
				c.stop(id)
				c.start(id)
			}
			l := c.leader()
			want := produce(t, l, 0, 100)
			c.converge(want)
			c.stop(l.id)
			want = append(want, produce(t, c.leader(l.id), 100, 50)...)
			c.start(l.id)
			c.converge(want)
			c.sameLogs()
		})
	}
}

// TestLeaderGoneElectsAtOnce: when the leader's process dies its
// connections end, and its followers elect a new leader at once instead
// of waiting out an election timeout (3 s here) after its last heartbeat.
func TestLeaderGoneElectsAtOnce(t *testing.T) {
	c := &testCluster{t: t, net: &memNet{groups: map[model.NodeID]*Group{}, cut: map[model.NodeID]bool{}},
		nodes: map[model.NodeID]*replica{}, tcp: true, addrs: map[model.NodeID]string{}, electionTicks: 300}
	c = newClusterFrom(c, 3)
	l := c.leader()
	want := produce(t, l, 0, 20)
	c.converge(want)
	stopped := time.Now()
	c.stop(l.id)
	next := c.leader(l.id)
	if took := time.Since(stopped); took >= 3*time.Second {
		t.Fatalf("new leader after %v: the followers waited out their election timeout", took)
	}
	want = append(want, produce(t, next, 20, 10)...)
	c.start(l.id)
	c.converge(want)
}

// TestTransportSecret: a peer that cannot answer the cluster secret's
// challenge is disconnected; members sharing it replicate.
func TestTransportSecret(t *testing.T) {
	tr, err := NewTCPTransport(TCPConfig{Cluster: "c", Node: 2, Listen: "127.0.0.1:0",
		Peers: map[model.NodeID]string{1: "127.0.0.1:1", 2: ""}, Secret: "right"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	impostor := &TCPTransport{cfg: TCPConfig{Cluster: "c", Node: 1, Secret: "wrong"}}
	if err := impostor.writeHello(c); err != nil {
		t.Fatal(err)
	}
	if err := impostor.prove(c, 1); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a peer with the wrong secret was kept")
	}
}

// TestTransportSecretBothWays: a dialing member refuses a listener that
// cannot prove the cluster secret (it would otherwise send it Raft's
// traffic); over TLS, a proof made for another session does not pass.
func TestTransportSecretBothWays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tr, err := NewTCPTransport(TCPConfig{Cluster: "c", Node: 1, Listen: "127.0.0.1:0",
		Peers: map[model.NodeID]string{1: "", 2: ln.Addr().String()}, Secret: "right"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	impostor := &TCPTransport{cfg: TCPConfig{Cluster: "c", Node: 2, Secret: "wrong"}}
	if _, _, err := decodeHello(c); err != nil {
		t.Fatal(err)
	}
	// It proves itself to us with the right secret ...
	if err := impostor.verify(c, 1); err == nil {
		t.Fatal("the member's proof passed under the wrong secret")
	}
	c.Close()
	// ... a listener with the wrong secret gets its proof, answers
	// wrongly, and is dropped.
	c, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := decodeHello(c); err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, 16)
	if _, err := c.Write(nonce); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	if err := impostor.prove(c, 2); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a listener with the wrong secret was kept")
	}

	// TLS without the secret is refused: nothing would authenticate.
	if _, err := NewTCPTransport(TCPConfig{Cluster: "c", Node: 1, Listen: "127.0.0.1:0", TLS: true}); err == nil {
		t.Fatal("TLS without a secret accepted")
	}
}

// TestFailedTransferReopens: a leadership hand-off to a member that cannot
// take over (cut off) fails, and the leader, still leading in the same
// term, opens its log for appends again (it stayed closed for good
// before); what it appends then reaches every member.
func TestFailedTransferReopens(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	want := produce(t, l, 0, 20)
	c.converge(want)
	_, term := l.group.Leader()
	var to model.NodeID
	for _, id := range c.ids {
		if id != l.id {
			to = id
			break
		}
	}
	c.net.setCut(to, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	// An append made while the hand-off is under way waits for it rather
	// than failing, and is stored once the log opens again.
	during := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer acancel()
		during <- l.engine.Append(actx, []*storage.Record{{Queue: 1, Count: 1, Payload: []byte("m00020")}})
	}()
	err := l.group.TransferLeadership(ctx, to)
	cancel()
	if err == nil {
		t.Fatalf("hand-off to cut-off node %d succeeded", to)
	}
	if err := <-during; err != nil {
		t.Fatalf("an append during the failed hand-off: %v", err)
	}
	want = append(want, "m00020")
	deadline := time.Now().Add(5 * time.Second)
	for !l.group.Writable() {
		if time.Now().After(deadline) {
			t.Fatal("the leader's log stayed closed after the failed hand-off")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if lead, tm := l.group.Leader(); lead != l.id || tm != term {
		t.Fatalf("leader %d term %d, want %d term %d", lead, tm, l.id, term)
	}
	want = append(want, produce(t, l, 21, 10)...)
	c.net.setCut(to, false)
	c.converge(want)
}

// TestWaitFailsAfterLeadershipReturned: a record written without waiting
// (a Kafka produce waits after its request's other appends) is cut when
// its leader loses the group, and the log grows past its position again
// once the same node leads anew. Waiting for it then fails instead of
// taking the new records' commit for its own.
func TestWaitFailsAfterLeadershipReturned(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	want := produce(t, l, 0, 10)
	c.converge(want)

	c.net.setCut(l.id, true)
	tk := l.engine.Ticket()
	lost := &storage.Record{Queue: 1, Count: 1, Payload: []byte("lost")}
	if err := l.engine.AppendWith(context.Background(), []*storage.Record{lost}, storage.AppendOptions{NoWait: true}); err != nil {
		t.Fatalf("append on the cut-off leader: %v", err)
	}
	end := lost.Pos + model.LogPos(lost.Size)
	l2 := c.leader(l.id)
	want = append(want, produce(t, l2, 10, 10)...)
	// The old leader, stepped down, answers a wait (a retried duplicate's)
	// at once rather than waiting for a commit it may not hear of.
	for deadline := time.Now().Add(5 * time.Second); l.group.Writable(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off leader did not step down")
		}
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
	werr := l.engine.WaitDurable(wctx, l.engine.WrittenEnd(), l.engine.Ticket())
	wcancel()
	if !errors.Is(werr, model.ErrNotLeader) {
		t.Fatalf("wait on a replica that stepped down: %v, want %v", werr, model.ErrNotLeader)
	}
	c.net.setCut(l.id, false)
	c.converge(want)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := l2.group.TransferLeadership(ctx, l.id)
	cancel()
	if err != nil {
		t.Fatalf("hand-back to node %d: %v", l.id, err)
	}
	if back := c.leader(); back.id != l.id {
		t.Fatalf("node %d leads, want %d", back.id, l.id)
	}
	want = append(want, produce(t, l, 20, 10)...)
	c.converge(want)
	if l.engine.CommitIndex() == 0 || l.engine.WrittenEnd() <= end {
		t.Fatalf("the log did not grow past the cut record (end %d, written %d)", end, l.engine.WrittenEnd())
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.engine.WaitDurable(ctx, end, tk); !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("wait for the cut record: %v, want %v", err, model.ErrNotLeader)
	}
}

// TestHandOffKeepsWaits: a record its leader wrote before handing the
// group off, and that the member taking over commits, is answered as
// committed to the writer waiting for it — not failed as on a loss of
// leadership, which makes clients send it again.
func TestHandOffKeepsWaits(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	want := produce(t, l, 0, 5)
	c.converge(want)
	var to, other model.NodeID
	for _, id := range c.ids {
		switch {
		case id == l.id:
		case to == 0:
			to = id
		default:
			other = id
		}
	}
	// Neither follower hears of the record until the hand-off starts, so
	// it is committed only as the hand-off completes.
	c.net.setCut(to, true)
	c.net.setCut(other, true)
	tk := l.engine.Ticket()
	rec := &storage.Record{Queue: 1, Count: 1, Payload: []byte("m00005")}
	if err := l.engine.AppendWith(context.Background(), []*storage.Record{rec}, storage.AppendOptions{NoWait: true}); err != nil {
		t.Fatal(err)
	}
	end := rec.Pos + model.LogPos(rec.Size)
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		waited <- l.engine.WaitDurable(ctx, end, tk)
	}()
	moved := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		moved <- l.group.TransferLeadership(ctx, to)
	}()
	time.Sleep(50 * time.Millisecond)
	c.net.setCut(to, false)
	if err := <-moved; err != nil {
		t.Fatalf("hand-off to node %d: %v", to, err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("wait for a record written before the hand-off: %v", err)
	}
	c.net.setCut(other, false)
	c.converge(append(want, "m00005"))
}

// waitUntil polls cond every 10 ms until it holds, failing after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}
