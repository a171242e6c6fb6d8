package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// addedGroupsKey holds the replication groups added to a running cluster
// after the ones it was made with (groupsKey): a JSON list whose entry i is
// group made+i. Groups are only ever added: a queue's group is recorded
// with its topic, so no queue moves when groups come.
const addedGroupsKey = "cluster/groups-added"

// AddedGroup is a replication group added while the cluster runs.
type AddedGroup struct {
	// Factor is how many voters the group has (0: the cluster's factor).
	Factor int `json:"factor,omitempty"`
}

// loadAdded reads the added groups and the record's revision (0: none).
func (m *Member) loadAdded(ctx context.Context) ([]AddedGroup, int64, error) {
	kv, err := m.store.Get(ctx, addedGroupsKey)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var added []AddedGroup
	if err := json.Unmarshal(kv.Value, &added); err != nil {
		return nil, 0, fmt.Errorf("%w: the cluster's added groups: %w", model.ErrCorruptRecord, err)
	}
	return added, kv.Revision, nil
}

// growTo makes the member's groups the ones the cluster was made with plus
// added, and returns the groups new to it.
func (m *Member) growTo(added []AddedGroup) []*Group {
	m.groupsMu.Lock()
	var fresh []*Group
	if len(added) > len(m.added) {
		m.added = added
	}
	for g := len(m.groups); g < m.MadeGroups()+len(m.added); g++ {
		gr := &Group{id: model.GroupID(g), dir: m.dir}
		m.groups = append(m.groups, gr)
		fresh = append(fresh, gr)
	}
	n := len(m.groups)
	m.groupsMu.Unlock()
	m.dir.SetGroups(n)
	return fresh
}

// servedGroups are the groups the member's Server knows (Server.Grow):
// replicas start only of these.
func (m *Member) servedGroups() []*Group {
	groups := m.Groups()
	if n := int(m.served.Load()); n < len(groups) {
		return groups[:n]
	}
	return groups
}

// FactorOf is how many voters group g has (placement.Voters): its own
// factor for a group added with one, else the cluster's.
func (m *Member) FactorOf(g model.GroupID) int {
	m.groupsMu.RLock()
	defer m.groupsMu.RUnlock()
	return m.factorIn(m.added, int(g))
}

// AddGroups records n more replication groups of factor voters each (0:
// the cluster's factor) and returns their ids. Every member starts
// serving them within moments (followGroups); their leaders spread over
// the members as every group's do. Refused, with nothing recorded: a
// factor other than 1, 3 or 5, more voters than the cluster has members,
// or more groups than the cluster takes.
func (m *Member) AddGroups(ctx context.Context, n, factor int) ([]model.GroupID, error) {
	for {
		ids, err := m.addGroupsAfter(ctx, n, factor, -1)
		if !errors.Is(err, errGroupsChanged) {
			return ids, err
		}
	}
}

// errGroupsChanged: groups were added since the caller looked.
var errGroupsChanged = errors.New("replication groups added meanwhile")

// addGroupsAfter is AddGroups once: after the added groups the caller saw
// (-1: whichever there are), else errGroupsChanged.
func (m *Member) addGroupsAfter(ctx context.Context, n, factor, seen int) ([]model.GroupID, error) {
	members := len(m.Members())
	switch {
	case n < 1:
		return nil, fmt.Errorf("%w: %d groups to add (at least 1)", model.ErrInvalidConfig, n)
	case factor != 0 && factor != 1 && factor != 3 && factor != 5:
		return nil, fmt.Errorf("%w: %d (1, 3 or 5)", model.ErrInvalidReplicationFactor, factor)
	case factor > members:
		return nil, fmt.Errorf("%w: %d on a cluster of %d members", model.ErrInvalidReplicationFactor, factor, members)
	}
	added, rev, err := m.loadAdded(ctx)
	if err != nil {
		return nil, err
	}
	if seen >= 0 && len(added) != seen {
		return nil, errGroupsChanged
	}
	first := m.MadeGroups() + len(added)
	if first+n > m.cfg.MaxGroups {
		return nil, fmt.Errorf("%w: %d groups and %d more: at most %d", model.ErrInvalidConfig, first, n, m.cfg.MaxGroups)
	}
	for range n {
		added = append(added, AddedGroup{Factor: factor})
	}
	b, err := json.Marshal(added)
	if err != nil {
		return nil, err
	}
	cmp := meta.Compare{Key: addedGroupsKey, Target: meta.CompareCreate}
	if rev != 0 {
		cmp = meta.Compare{Key: addedGroupsKey, Target: meta.CompareMod, Revision: rev}
	}
	_, err = m.store.Txn(ctx, []meta.Compare{cmp}, []meta.Op{{Key: addedGroupsKey, Value: b}})
	if errors.Is(err, meta.ErrConflict) {
		return nil, errGroupsChanged
	}
	if err != nil {
		return nil, err
	}
	ids := make([]model.GroupID, n)
	for i := range ids {
		ids[i] = model.GroupID(first + i)
	}
	m.log.Info("replication groups added", "groups", ids, "factor", factor)
	return ids, nil // every member, this one too, follows the record (followGroups)
}

// followGroups grows the member's groups as the cluster's record of added
// groups grows, telling grown of each group new to it, until ctx ends.
func (m *Member) followGroups(ctx context.Context, grown func([]*Group)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(time.Second):
		}
		added, _, err := m.loadAdded(ctx)
		if err != nil {
			continue
		}
		if fresh := m.growTo(added); len(fresh) > 0 {
			m.log.Info("replication groups added to the cluster", "first", fresh[0].id, "groups", len(m.Groups()))
			grown(fresh)
			m.served.Store(int32(len(m.Groups())))
		}
	}
}

// factorIn is the factor of group g given the added groups (made groups
// have the cluster's).
func (m *Member) factorIn(added []AddedGroup, g int) int {
	if i := g - m.MadeGroups(); i >= 0 && i < len(added) && added[i].Factor > 0 {
		return added[i].Factor
	}
	return m.factor
}

// GroupsOf are the groups of factor voters (0: the cluster's factor; -1:
// every group) as the member knows them now.
func (m *Member) GroupsOf(factor int) []model.GroupID {
	if factor == 0 {
		factor = m.factor
	}
	var out []model.GroupID
	for _, gr := range m.Groups() {
		if factor < 0 || m.FactorOf(gr.id) == factor {
			out = append(out, gr.id)
		}
	}
	return out
}

// MakeGroups returns the groups of factor voters as the cluster records
// them, adding one per member (leaders spread over them all) when there
// are none: a topic asking for a factor no group has yet. Refused: a
// factor other than 1, 3 or 5 or above the members.
func (m *Member) MakeGroups(ctx context.Context, factor int) ([]model.GroupID, error) {
	if factor == 0 {
		factor = m.factor
	}
	for {
		added, _, err := m.loadAdded(ctx)
		if err != nil {
			return nil, err
		}
		var have []model.GroupID
		for g := range m.MadeGroups() + len(added) {
			if m.factorIn(added, g) == factor {
				have = append(have, model.GroupID(g))
			}
		}
		if len(have) > 0 {
			return have, nil
		}
		n := min(len(m.Members()), m.cfg.MaxGroups-m.MadeGroups()-len(added))
		if n < 1 {
			return nil, fmt.Errorf("%w: no groups of %d voters and no room for more (at most %d groups)",
				model.ErrInvalidReplicationFactor, factor, m.cfg.MaxGroups)
		}
		ids, err := m.addGroupsAfter(ctx, n, factor, len(added))
		if errors.Is(err, errGroupsChanged) {
			continue // groups were added meanwhile: look again
		}
		return ids, err
	}
}
