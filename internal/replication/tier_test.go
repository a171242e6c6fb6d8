package replication

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/tier"
	"github.com/rosettamq/rosetta/internal/storage/tier/s3bucket"
)

// produceSized appends n messages of about size bytes to queue 1 on r.
func produceSized(t *testing.T, r *replica, from, n, size int) []string {
	t.Helper()
	var out []string
	for i := from; i < from+n; i++ {
		p := fmt.Sprintf("m%05d|%s", i, strings.Repeat("x", size))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.engine.Append(ctx, []*storage.Record{{Queue: 1, Count: 1, Payload: []byte(p)}})
		cancel()
		if err != nil {
			t.Fatalf("append %d on node %d: %v", i, r.id, err)
		}
		out = append(out, p)
	}
	return out
}

// waitTiered waits until every live node's manifest names n segments.
func (c *testCluster) waitTiered(n int) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, id := range c.ids {
		r := c.nodes[id]
		for r.group != nil && len(r.engine.TieredSegments()) != n {
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d has %d tiered segments, want %d", id, len(r.engine.TieredSegments()), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// testBucket starts an in-process S3 server on loopback with a bucket.
func testBucket(t *testing.T) *s3bucket.Bucket {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	b, err := s3bucket.New(t.Context(), s3bucket.Config{Endpoint: srv.URL, Bucket: "tier", AccessKey: "a", SecretKey: "s", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreateBucket(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTieringReplicated: only the leader uploads; its commit records reach
// every replica, which then delete their local copies and read the history
// from the bucket; a new leader uploads under its own term, its sweep keeps
// every committed object and removes an orphan; a restarted replica comes
// back with the manifest.
func TestTieringReplicated(t *testing.T) {
	b := testBucket(t)
	c := newClusterFrom(&testCluster{t: t, net: &memNet{groups: map[model.NodeID]*Group{}, cut: map[model.NodeID]bool{}},
		nodes: map[model.NodeID]*replica{}, addrs: map[model.NodeID]string{}, bucket: b}, 3)
	ctx := context.Background()
	l := c.leader()
	want := produceSized(t, l, 0, 1500, 200)
	c.converge(want)
	for _, id := range c.ids {
		if r := c.nodes[id]; r != l {
			if n, err := r.engine.UploadSealed(ctx); err != nil || n != 0 {
				t.Fatalf("follower %d uploaded %d segments: %v", id, n, err)
			}
		}
	}
	n, err := l.engine.UploadSealed(ctx)
	if err != nil || n < 3 {
		t.Fatalf("leader uploaded %d segments: %v", n, err)
	}
	c.waitTiered(n)
	for _, id := range c.ids {
		if _, err := c.nodes[id].engine.EnforceRetention(); err != nil {
			t.Fatal(err)
		}
		if st := c.nodes[id].engine.TierStatus(); st.LocalSegments != 0 {
			t.Fatalf("node %d keeps %d tiered segments locally", id, st.LocalSegments)
		}
	}
	c.converge(want)

	// A new leader uploads what follows under its own term.
	c.stop(l.id)
	l2 := c.leader(l.id)
	want = append(want, produceSized(t, l2, 1500, 1000, 200)...)
	n2, err := l2.engine.UploadSealed(ctx)
	if err != nil || n2 == 0 {
		t.Fatalf("new leader uploaded %d segments: %v", n2, err)
	}
	segs := l2.engine.TieredSegments()
	if last := segs[len(segs)-1]; last.Term == segs[0].Term || !strings.HasSuffix(last.Key, fmt.Sprintf("-%d", last.Term)) {
		t.Fatalf("new leader's object %s (term %d), first %s (term %d)", last.Key, last.Term, segs[0].Key, segs[0].Term)
	}
	// An orphan (an upload whose commit never came) goes; committed objects stay.
	if err := b.Create(ctx, "g1/00000000000000000002-999", 1, bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	res, err := l2.engine.SweepBucket(ctx, -time.Minute)
	if err != nil || res.Deleted != 1 {
		t.Fatalf("sweep %+v: %v", res, err)
	}
	var keys int
	_ = b.List(ctx, "g1/", func(tier.ObjectInfo) bool { keys++; return true })
	if keys != n+n2 {
		t.Fatalf("bucket holds %d objects, manifest %d", keys, n+n2)
	}

	// The old leader comes back, catches up, with the manifest.
	c.start(l.id)
	c.converge(want)
	c.waitTiered(n + n2)
}

// gatedBucket writes objects through; once armed, the next Create writes
// its object and then waits for release before answering: an upload in
// flight whose commit record is not written yet.
type gatedBucket struct {
	tier.Bucket
	armed   atomic.Bool
	reached chan string // the gated object's key
	release chan struct{}
}

func (g *gatedBucket) Create(ctx context.Context, key string, size int64, body io.Reader) error {
	err := g.Bucket.Create(ctx, key, size, body)
	if g.armed.CompareAndSwap(true, false) {
		g.reached <- key
		<-g.release
	}
	return err
}

// TestTieringDeposedLeaderUpload: a leader cut off while its upload is in
// flight (the object written, the commit not yet) fails to commit it; the
// new leader uploads the segment under its own term; no replica's manifest
// ever names the deposed term's object, and the sweep removes it.
func TestTieringDeposedLeaderUpload(t *testing.T) {
	gate := &gatedBucket{Bucket: testBucket(t), reached: make(chan string, 1), release: make(chan struct{})}
	c := newClusterFrom(&testCluster{t: t, net: &memNet{groups: map[model.NodeID]*Group{}, cut: map[model.NodeID]bool{}},
		nodes: map[model.NodeID]*replica{}, addrs: map[model.NodeID]string{}, bucket: gate}, 3)
	ctx := context.Background()
	l := c.leader()
	want := produceSized(t, l, 0, 800, 200)
	c.converge(want)
	gate.armed.Store(true)
	uploaded := make(chan error, 1)
	go func() {
		_, err := l.engine.UploadSealed(ctx)
		uploaded <- err
	}()
	var orphan string
	select {
	case orphan = <-gate.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's upload never reached the bucket")
	}
	c.net.setCut(l.id, true)
	l2 := c.leader(l.id)
	close(gate.release)
	select {
	case err := <-uploaded:
		if err == nil {
			t.Fatal("the cut-off leader committed its upload")
		}
		t.Logf("the deposed leader's upload of %s: %v", orphan, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the deposed leader's upload never returned")
	}
	var n int
	deadline := time.Now().Add(10 * time.Second)
	for n == 0 && time.Now().Before(deadline) {
		var err error
		if n, err = l2.engine.UploadSealed(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n < 2 {
		t.Fatalf("the new leader uploaded %d segments", n)
	}
	c.net.setCut(l.id, false)
	c.converge(want)
	c.waitTiered(n)
	for _, id := range c.ids {
		for _, s := range c.nodes[id].engine.TieredSegments() {
			if s.Key == orphan {
				t.Fatalf("node %d's manifest names the deposed leader's object %s", id, orphan)
			}
		}
		if _, err := c.nodes[id].engine.EnforceRetention(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := l2.engine.SweepBucket(ctx, -time.Minute)
	if err != nil || res.Deleted != 1 {
		t.Fatalf("sweep %+v: %v", res, err)
	}
	keys := map[string]bool{}
	_ = gate.List(ctx, "g1/", func(o tier.ObjectInfo) bool { keys[o.Key] = true; return true })
	if keys[orphan] || len(keys) != n {
		t.Fatalf("bucket holds %d objects (the orphan: %v), manifest %d", len(keys), keys[orphan], n)
	}
	c.converge(want) // from the bucket now
}
