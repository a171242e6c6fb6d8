package directory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/task"
)

// MembersKey holds the cluster's members, as cluster.members spells them.
const MembersKey = "cluster/members"

// GroupMembersKey holds group g's membership as its leader applied it.
func GroupMembersKey(g model.GroupID) string { return fmt.Sprintf("cluster/group-members/%d", g) }

// leaderPrefix is where the groups' leaders publish themselves.
const leaderPrefix = "cluster/group-leader/"

// leaderKey holds group g's leader as it published itself.
func leaderKey(g model.GroupID) string { return leaderPrefix + strconv.Itoa(int(g)) }

// Leader is a group's leader as published under its key, with the voters
// it holds in sync (Kafka's ISR, as other members tell clients of it).
type Leader struct {
	Node model.NodeID   `json:"node"`
	Term model.Term     `json:"term"`
	ISR  []model.NodeID `json:"isr,omitempty"`
}

// same reports whether l and o name the same leader in the same term.
func (l Leader) same(o Leader) bool { return l.Node == o.Node && l.Term == o.Term }

// SetGroups sizes the published leaders for n groups (never shrinks).
func (d *Directory) SetGroups(n int) {
	d.leadersMu.Lock()
	defer d.leadersMu.Unlock()
	for len(d.leaders) < n {
		d.leaders = append(d.leaders, &atomic.Pointer[Leader]{})
	}
}

func (d *Directory) leaderSlot(g model.GroupID) *atomic.Pointer[Leader] {
	d.leadersMu.Lock()
	defer d.leadersMu.Unlock()
	if g < 0 || int(g) >= len(d.leaders) {
		return nil
	}
	return d.leaders[g]
}

// PublishedLeader is group g's leader as it last published itself (false
// while none is known).
func (d *Directory) PublishedLeader(g model.GroupID) (Leader, bool) {
	if s := d.leaderSlot(g); s != nil {
		if l := s.Load(); l != nil {
			return *l, true
		}
	}
	return Leader{}, false
}

// PublishLeader records this member as group g's leader in term tm with
// the voters it holds in sync, unless a later term is recorded.
func (d *Directory) PublishLeader(ctx context.Context, g model.GroupID, tm model.Term, isr []model.NodeID) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rec := Leader{Node: d.self, Term: tm, ISR: isr}
	b, _ := json.Marshal(rec)
	key := leaderKey(g)
	kv, err := d.store.Get(ctx, key)
	cmp := meta.Compare{Key: key, Target: meta.CompareCreate}
	switch {
	case errors.Is(err, meta.ErrNotFound):
	case err != nil:
		return err
	default:
		var cur Leader
		if json.Unmarshal(kv.Value, &cur) == nil && (cur.Term > tm || cur.same(rec) && slices.Equal(cur.ISR, isr)) {
			return nil
		}
		cmp = meta.Compare{Key: key, Target: meta.CompareMod, Revision: kv.Revision}
	}
	_, err = d.store.Txn(ctx, []meta.Compare{cmp}, []meta.Op{{Key: key, Value: b}})
	if errors.Is(err, meta.ErrConflict) {
		return nil // another leader published meanwhile; the next check looks again
	}
	return err
}

// WatchLeaders follows the leaders the groups publish until ctx ends,
// calling changed with each group whose published leader or term changed
// (not for a new in-sync set alone).
func (d *Directory) WatchLeaders(ctx context.Context, retry time.Duration, changed func(model.GroupID)) {
	apply := func(kv meta.KV) {
		g, err := strconv.Atoi(strings.TrimPrefix(kv.Key, leaderPrefix))
		var rec Leader
		if err != nil || json.Unmarshal(kv.Value, &rec) != nil {
			return
		}
		s := d.leaderSlot(model.GroupID(g))
		if s == nil {
			return
		}
		if old := s.Swap(&rec); old != nil && old.same(rec) {
			return
		}
		changed(model.GroupID(g))
	}
	for ctx.Err() == nil {
		kvs, rev, err := d.store.ListRev(ctx, leaderPrefix)
		if err != nil {
			task.Sleep(ctx, retry)
			continue
		}
		for _, kv := range kvs {
			apply(kv)
		}
		for ev := range d.store.WatchFrom(ctx, leaderPrefix, rev) {
			if ev.Compacted {
				break
			}
			if !ev.Deleted {
				apply(ev.KV)
			}
		}
		task.Sleep(ctx, 100*time.Millisecond) // the watch ended: list again
	}
}

// GroupMembership is group g's membership as its leader published it
// (false while none is).
func (d *Directory) GroupMembership(ctx context.Context, g model.GroupID) (replication.Membership, bool, error) {
	var m replication.Membership
	kv, err := d.store.Get(ctx, GroupMembersKey(g))
	if errors.Is(err, meta.ErrNotFound) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return m, false, fmt.Errorf("%w: group %d's recorded membership: %w", model.ErrCorruptRecord, g, err)
	}
	return m, true, nil
}

// PublishMembership records group g's membership as its leader applied it.
func (d *Directory) PublishMembership(ctx context.Context, g model.GroupID, m replication.Membership) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return meta.Put(ctx, d.store, GroupMembersKey(g), b)
}

// ResolveMembers settles the cluster's members once the metadata is open:
// the recorded list (recorded from the members known now when the cluster
// is made). A member not in it was never added, or was removed.
func (d *Directory) ResolveMembers(ctx context.Context, cluster string) (changed bool, err error) {
	_, err = d.store.Txn(ctx, []meta.Compare{{Key: MembersKey, Target: meta.CompareCreate}},
		[]meta.Op{{Key: MembersKey, Value: []byte(FormatMembers(d.Members()))}})
	if err != nil && !errors.Is(err, meta.ErrConflict) {
		return false, err
	}
	kv, err := d.store.Get(ctx, MembersKey)
	if err != nil {
		return false, err
	}
	recorded, err := parseRecorded(string(kv.Value))
	if err != nil {
		return false, fmt.Errorf("the cluster's recorded members: %w", err)
	}
	if _, ok := recorded[d.self]; !ok {
		return false, fmt.Errorf("%w: node %d is not a member of cluster %q (members: %s); add it first with `rosetta cluster member add %d=<host>` against a member",
			model.ErrInvalidConfig, d.self, cluster, kv.Value, d.self)
	}
	changed = FormatMembers(recorded) != FormatMembers(d.Members())
	d.SetMembers(recorded)
	return changed, nil
}

// LoadMembers takes the recorded member list (a node that is no member
// itself: a protocol-only node).
func (d *Directory) LoadMembers(ctx context.Context) error {
	kv, err := d.store.Get(ctx, MembersKey)
	if err != nil {
		return fmt.Errorf("the cluster's recorded members: %w", err)
	}
	recorded, err := parseRecorded(string(kv.Value))
	if err != nil {
		return fmt.Errorf("the cluster's recorded members: %w", err)
	}
	d.SetMembers(recorded)
	return nil
}

// WatchMembers follows the recorded member list until ctx ends, checking
// it every interval: each change replaces the members and is told to
// changed with the list before it.
func (d *Directory) WatchMembers(ctx context.Context, interval time.Duration, changed func(prev, next placement.Members)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		kv, err := d.store.Get(gctx, MembersKey)
		cancel()
		if err != nil {
			continue
		}
		next, err := parseRecorded(string(kv.Value))
		cur := d.Members()
		if err != nil || maps.Equal(next, cur) {
			continue
		}
		d.SetMembers(next)
		changed(cur, next)
	}
}

// RecordMembers replaces the recorded member list cur with next (refused
// if it changed meanwhile).
func (d *Directory) RecordMembers(ctx context.Context, cur, next placement.Members) error {
	conflict := fmt.Errorf("%w: the cluster's members changed meanwhile; try again", meta.ErrConflict)
	kv, err := d.store.Get(ctx, MembersKey)
	if err != nil {
		return err
	}
	if string(kv.Value) != FormatMembers(cur) {
		return conflict
	}
	_, err = d.store.Txn(ctx, []meta.Compare{{Key: MembersKey, Target: meta.CompareMod, Revision: kv.Revision}},
		[]meta.Op{{Key: MembersKey, Value: []byte(FormatMembers(next))}})
	if errors.Is(err, meta.ErrConflict) {
		return conflict
	}
	return err
}

// WaitGroups waits, checking every interval until ctx ends, for every one
// of groups' published memberships to satisfy ok.
func (d *Directory) WaitGroups(ctx context.Context, groups int, interval time.Duration, ok func(model.GroupID, replication.Membership) bool) error {
	for {
		done := true
		for g := range model.GroupID(groups) {
			m, published, err := d.GroupMembership(ctx, g)
			if err != nil || !published || !ok(g, m) {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
