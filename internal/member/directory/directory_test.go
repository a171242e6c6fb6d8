package directory

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

func store(t *testing.T) meta.Store {
	t.Helper()
	s, err := meta.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestParseAndFormatMembers(t *testing.T) {
	m, err := ParseMembers(" 2=127.0.0.12, 1=127.0.0.11,3=::1")
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatMembers(m); got != "1=127.0.0.11,2=127.0.0.12,3=::1" {
		t.Fatalf("formatted %q", got)
	}
	var tooMany []string
	for i := 1; i <= placement.MaxMembers+1; i++ {
		tooMany = append(tooMany, fmt.Sprintf("%d=h%d", i, i))
	}
	if m, err := ParseMembers("1=a,2=b,3=c,4=d,5=e,6=f,7=g"); err != nil || len(m) != 7 {
		t.Fatalf("seven members: %v %v", m, err)
	}
	for _, bad := range []string{"1", "0=a", "1=a,1=b", "x=a", "1=a:9", strings.Join(tooMany, ",")} {
		if _, err := ParseMembers(bad); !errors.Is(err, model.ErrInvalidConfig) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if m, err := ParseMembers(" "); m != nil || err != nil {
		t.Fatalf("empty: %v %v", m, err)
	}
}

// TestResolveAndRecordMembers: the first member records the list it was
// started with; the record holds after that, a node not in it is refused,
// and a change made from a stale list is refused.
func TestResolveAndRecordMembers(t *testing.T) {
	ctx := context.Background()
	s := store(t)
	three := placement.Members{1: "a", 2: "b", 3: "c"}
	d1 := New(s, 1, three)
	if changed, err := d1.ResolveMembers(ctx, "c"); err != nil || changed {
		t.Fatalf("the first member: %v, changed %v", err, changed)
	}
	d2 := New(s, 2, placement.Members{1: "a", 2: "b"})
	if changed, err := d2.ResolveMembers(ctx, "c"); err != nil || !changed || FormatMembers(d2.Members()) != "1=a,2=b,3=c" {
		t.Fatalf("a member started with another list: %v, changed %v, %v", err, changed, d2.Members())
	}
	if _, err := New(s, 4, placement.Members{4: "d"}).ResolveMembers(ctx, "c"); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("a node never added: %v", err)
	}
	four := placement.Members{1: "a", 2: "b", 3: "c", 4: "d"}
	if err := d1.RecordMembers(ctx, three, four); err != nil {
		t.Fatal(err)
	}
	if err := d2.RecordMembers(ctx, three, placement.Members{1: "a", 2: "b"}); !errors.Is(err, meta.ErrConflict) {
		t.Fatalf("a change from a stale list: %v", err)
	}
	// A member that left stays known by its host.
	d1.SetMembers(placement.Members{1: "a", 2: "b"})
	if h, ok := d1.HostOf(3); !ok || h != "c" {
		t.Fatalf("a member that left: %q %v", h, ok)
	}
	if _, ok := d1.HostOf(9); ok {
		t.Fatal("a node never known has a host")
	}
}

// TestLeadersArePublishedByTerm: a group's leader record only moves to a
// later term, and members watching see each change once.
func TestLeadersArePublishedByTerm(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := store(t)
	m := placement.Members{1: "a", 2: "b"}
	d1, d2, watcher := New(s, 1, m), New(s, 2, m), New(s, 3, m)
	for _, d := range []*Directory{d1, d2, watcher} {
		d.SetGroups(2)
	}
	changes := make(chan model.GroupID, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watcher.WatchLeaders(ctx, 10*time.Millisecond, func(g model.GroupID) { changes <- g })
	}()
	if err := d1.PublishLeader(ctx, 1, 5, []model.NodeID{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := d2.PublishLeader(ctx, 1, 4, nil); err != nil { // an earlier term: ignored
		t.Fatal(err)
	}
	if g := <-changes; g != 1 {
		t.Fatalf("change of group %d", g)
	}
	if l, ok := watcher.PublishedLeader(1); !ok || !l.same(Leader{Node: 1, Term: 5}) || !slices.Equal(l.ISR, []model.NodeID{1, 2}) {
		t.Fatalf("published %+v %v", l, ok)
	}
	// A smaller in-sync set in the same term is recorded without a change
	// of leader told.
	if err := d1.PublishLeader(ctx, 1, 5, []model.NodeID{1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { l, _ := watcher.PublishedLeader(1); return slices.Equal(l.ISR, []model.NodeID{1}) })
	if err := d2.PublishLeader(ctx, 1, 6, nil); err != nil {
		t.Fatal(err)
	}
	if g := <-changes; g != 1 {
		t.Fatalf("change of group %d", g)
	}
	if l, _ := watcher.PublishedLeader(1); !l.same(Leader{Node: 2, Term: 6}) || l.ISR != nil {
		t.Fatalf("published %+v", l)
	}
	if _, ok := watcher.PublishedLeader(0); ok {
		t.Fatal("group 0 has a published leader")
	}
	cancel()
	<-done
	select {
	case g := <-changes:
		t.Fatalf("a change of group %d told twice", g)
	default:
	}
}

func TestGroupMemberships(t *testing.T) {
	ctx := context.Background()
	d := New(store(t), 1, placement.Members{1: "a"})
	if _, ok, err := d.GroupMembership(ctx, 0); ok || err != nil {
		t.Fatalf("unpublished: %v %v", ok, err)
	}
	for g := range model.GroupID(2) {
		if err := d.PublishMembership(ctx, g, replication.Membership{Voters: []model.NodeID{1, 2}}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	has := func(n model.NodeID) func(model.GroupID, replication.Membership) bool {
		return func(_ model.GroupID, m replication.Membership) bool { return m.Has(n) }
	}
	if err := d.WaitGroups(wctx, 2, time.Millisecond, has(2)); err != nil {
		t.Fatal(err)
	}
	sctx, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if err := d.WaitGroups(sctx, 3, time.Millisecond, has(2)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a group never published: %v", err)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
