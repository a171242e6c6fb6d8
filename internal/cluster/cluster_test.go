package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/meta/metatest"
	"github.com/rosettamq/rosetta/internal/model"
)

func nodeIDs(t *testing.T, s meta.Store) string {
	t.Helper()
	nodes, err := cluster.Nodes(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]model.NodeID, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return fmt.Sprint(ids)
}

// TestMembership: the first node creates the cluster's identity and later
// ones adopt it; nodes list while registered; a restarted node (a newer
// incarnation) replaces its older self, which learns it is fenced; an older
// incarnation cannot come back; a node that leaves is gone at once; a node
// whose lease the store ended registers again.
func TestMembership(t *testing.T) {
	metatest.Stores(t, func(t *testing.T, s meta.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		join := func(id, inc int64, proposed string) (*cluster.Membership, error) {
			return cluster.Join(ctx, s, cluster.Node{ID: model.NodeID(id), Incarnation: inc, Endpoints: map[string]string{"kafka": "127.0.0.1:9092"}},
				cluster.MembershipOptions{TTL: 2 * time.Second, ClusterID: model.ClusterID(proposed)})
		}
		n1, err := join(1, 1, "alpha")
		if err != nil {
			t.Fatal(err)
		}
		n2, err := join(2, 1, "beta")
		if err != nil {
			t.Fatal(err)
		}
		if n1.ClusterID() != "alpha" || n2.ClusterID() != "alpha" {
			t.Fatalf("cluster ids %q %q", n1.ClusterID(), n2.ClusterID())
		}
		if ids := nodeIDs(t, s); ids != "[1 2]" {
			t.Fatalf("nodes %s", ids)
		}
		n2again, err := join(2, 2, "")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-n2.Lost():
			if !errors.Is(n2.Err(), cluster.ErrFenced) {
				t.Fatalf("lost with %v", n2.Err())
			}
		case <-ctx.Done():
			t.Fatal("the older incarnation never learned it was replaced")
		}
		if _, err := join(2, 1, ""); !errors.Is(err, cluster.ErrFenced) {
			t.Fatalf("an older incarnation joined: %v", err)
		}
		if err := n2again.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		if ids := nodeIDs(t, s); ids != "[1]" {
			t.Fatalf("nodes after a leave %s", ids)
		}
		// Node 1's lease ends though the node lives (an etcd leader change
		// can expire it): the node registers again under a new lease.
		first := n1.Lease()
		if err := s.Revoke(ctx, first); err != nil {
			t.Fatal(err)
		}
		for n1.Lease() == first || nodeIDs(t, s) != "[1]" {
			select {
			case <-n1.Lost():
				t.Fatalf("node 1 lost: %v", n1.Err())
			case <-ctx.Done():
				t.Fatalf("node 1 never registered again (nodes %s)", nodeIDs(t, s))
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err := s.KeepAlive(ctx, n1.Lease()); err != nil {
			t.Fatalf("the new lease: %v", err)
		}
		select {
		case <-n1.Lost():
			t.Fatalf("node 1 lost: %v", n1.Err())
		default:
		}
		if err := n1.Leave(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestElection: one candidate wins; the next waits and wins when the
// first resigns or its lease ends; the deposed leader's fenced writes fail.
func TestElection(t *testing.T) {
	metatest.Stores(t, func(t *testing.T, s meta.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l1, _ := s.Grant(ctx, time.Hour)
		l2, _ := s.Grant(ctx, 2*time.Second)
		l3, _ := s.Grant(ctx, time.Hour)
		first, err := cluster.Campaign(ctx, s, "controller", []byte("1"), l1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := first.Txn(ctx, nil, []meta.Op{{Key: "topics/a", Value: []byte("by 1")}}); err != nil {
			t.Fatal(err)
		}
		won := make(chan *cluster.Leadership, 1)
		go func() {
			l, err := cluster.Campaign(ctx, s, "controller", []byte("2"), l2)
			if err != nil {
				t.Error(err)
			}
			won <- l
		}()
		select {
		case <-won:
			t.Fatal("a second leader while the first holds")
		case <-time.After(300 * time.Millisecond):
		}
		if err := first.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		second := <-won
		if second == nil || second.Token <= first.Token {
			t.Fatalf("second leadership %+v after token %d", second, first.Token)
		}
		if kv, err := cluster.Leader(ctx, s, "controller"); err != nil || string(kv.Value) != "2" {
			t.Fatalf("leader %q %v", kv.Value, err)
		}
		if _, err := first.Txn(ctx, nil, []meta.Op{{Key: "topics/a", Value: []byte("late write by 1")}}); !errors.Is(err, cluster.ErrNotLeader) {
			t.Fatalf("a deposed leader's write: %v", err)
		}
		// The second's lease is never kept alive: when it ends, a third wins.
		third, err := cluster.Campaign(ctx, s, "controller", []byte("3"), l3)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := second.Txn(ctx, nil, []meta.Op{{Key: "topics/a", Value: []byte("late write by 2")}}); !errors.Is(err, cluster.ErrNotLeader) {
			t.Fatalf("an expired leader's write: %v", err)
		}
		if _, err := third.Txn(ctx, nil, []meta.Op{{Key: "topics/a", Value: []byte("by 3")}}); err != nil {
			t.Fatal(err)
		}
		if kv, _ := s.Get(ctx, "topics/a"); string(kv.Value) != "by 3" {
			t.Fatalf("topics/a = %q", kv.Value)
		}
	})
}
