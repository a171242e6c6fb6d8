// Package directory is what a cluster member knows of the others from the
// cluster's metadata (etcd): the members and their hosts, each group's
// leader as that leader published itself, and each group's membership as
// its leader applied it. Members follow these records with watches; a
// group's leader writes its own (PublishLeader, PublishMembership), and an
// operator's member add or remove rewrites the member list
// (RecordMembers).
//
// Key layout under the cluster's prefix:
//
//	cluster/members            the members, as cluster.members spells them
//	cluster/group-members/<g>  JSON: group g's voters and learners
//	cluster/group-leader/<g>   JSON: group g's leader and its Raft term
package directory

import (
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rosettamq/rosetta/internal/member/placement"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// Directory is a member's view of the cluster's members and of the
// groups' published leaders.
type Directory struct {
	store meta.Store
	self  model.NodeID

	// hosts: the cluster's members by id, replaced whole when one joins
	// or leaves; known: every host ever a member's (HostOf).
	hosts   atomic.Pointer[placement.Members]
	known   atomic.Pointer[placement.Members]
	hostsMu sync.Mutex // serialises SetMembers

	leadersMu sync.Mutex
	leaders   []*atomic.Pointer[Leader] // by group, as published
}

// New makes member self's directory over the metadata store, starting
// from members (cluster.members until the recorded list is read). store may
// be nil until SetStore.
func New(store meta.Store, self model.NodeID, members placement.Members) *Directory {
	d := &Directory{store: store, self: self}
	d.SetMembers(members)
	return d
}

// SetStore sets the metadata store once it is open.
func (d *Directory) SetStore(s meta.Store) { d.store = s }

// Self is this member's id.
func (d *Directory) Self() model.NodeID { return d.self }

// Members returns the cluster's members by id (do not modify).
func (d *Directory) Members() placement.Members { return *d.hosts.Load() }

// SelfHost is this member's host ("" once it was removed).
func (d *Directory) SelfHost() string { return d.Members()[d.self] }

// SetMembers replaces the cluster's members; the hosts of members that
// left stay known (a group they still lead is reached there until it
// moves).
func (d *Directory) SetMembers(m placement.Members) {
	d.hostsMu.Lock()
	defer d.hostsMu.Unlock()
	known := placement.Members{}
	if k := d.known.Load(); k != nil {
		maps.Copy(known, *k)
	}
	maps.Copy(known, m)
	d.known.Store(&known)
	d.hosts.Store(&m)
}

// HostOf is the host of node id: a member's, or one that left ("" and
// false for a node never known).
func (d *Directory) HostOf(id model.NodeID) (string, bool) {
	if h, ok := d.Members()[id]; ok {
		return h, true
	}
	if k := d.known.Load(); k != nil {
		h, ok := (*k)[id]
		return h, ok
	}
	return "", false
}

// FormatMembers spells members as cluster.members does, in id order.
func FormatMembers(m placement.Members) string {
	parts := make([]string, 0, len(m))
	for _, id := range placement.SortedIDs(m) {
		parts = append(parts, fmt.Sprintf("%d=%s", id, m[id]))
	}
	return strings.Join(parts, ",")
}

// ParseMembers reads a member list spelled as cluster.members is
// (id=host,…; nil for an empty one).
func ParseMembers(s string) (placement.Members, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := placement.Members{}
	for _, part := range strings.Split(s, ",") {
		idStr, host, ok := strings.Cut(strings.TrimSpace(part), "=")
		id, err := strconv.Atoi(strings.TrimSpace(idStr))
		host = strings.TrimSpace(host)
		if !ok || err != nil || id <= 0 || host == "" || strings.Contains(host, ":") && net.ParseIP(host) == nil {
			return nil, fmt.Errorf("%w: cluster.members entry %q: want id=host", model.ErrInvalidConfig, part)
		}
		if _, dup := out[model.NodeID(id)]; dup {
			return nil, fmt.Errorf("%w: cluster.members names node %d twice", model.ErrInvalidConfig, id)
		}
		out[model.NodeID(id)] = host
	}
	if len(out) > placement.MaxMembers {
		return nil, fmt.Errorf("%w: cluster.members names %d nodes; a cluster has up to %d", model.ErrInvalidConfig, len(out), placement.MaxMembers)
	}
	return out, nil
}

// parseRecorded reads a recorded member list (never empty).
func parseRecorded(s string) (placement.Members, error) {
	m, err := ParseMembers(s)
	if err == nil && len(m) == 0 {
		err = fmt.Errorf("%w: empty member list", model.ErrInvalidConfig)
	}
	return m, err
}
