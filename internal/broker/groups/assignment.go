package groups

import (
	"bytes"
	"slices"
	"sort"
)

// TopicID identifies a topic in consumer-group assignments (Kafka's topic
// id).
type TopicID = [16]byte

// TopicMeta is what the coordinator knows of a topic.
type TopicMeta struct {
	ID         TopicID
	Name       string
	Partitions int32
}

// Topics is the coordinator's view of the topics members subscribe to; the
// front-end provides it in the names its clients use.
type Topics interface {
	// ByName returns a topic by the name members subscribe with.
	ByName(name string) (TopicMeta, bool)
	// ByID returns a topic by id.
	ByID(id TopicID) (TopicMeta, bool)
	// All lists the topics a regular expression may match (no internal
	// topics).
	All() []TopicMeta
	// Version changes whenever a topic is created, deleted or grows.
	Version() uint64
}

// TopicPartitions is a topic and some of its partitions.
type TopicPartitions struct {
	Topic      TopicID
	Partitions []int32
}

// Assignment is a set of partitions per topic.
type Assignment map[TopicID][]int32

func (a Assignment) add(t TopicID, p int32) { a[t] = append(a[t], p) }

// sorted lists the assignment by topic id, partitions ascending.
func (a Assignment) sorted() []TopicPartitions {
	out := make([]TopicPartitions, 0, len(a))
	for t, ps := range a {
		ps = slices.Clone(ps)
		slices.Sort(ps)
		out = append(out, TopicPartitions{Topic: t, Partitions: ps})
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Topic[:], out[j].Topic[:]) < 0 })
	return out
}

// epochSet holds partitions per topic with the epoch each was assigned at.
type epochSet map[TopicID]map[int32]int32

func (s epochSet) has(t TopicID, p int32) bool {
	_, ok := s[t][p]
	return ok
}

func (s epochSet) put(t TopicID, p, epoch int32) {
	m := s[t]
	if m == nil {
		m = map[int32]int32{}
		s[t] = m
	}
	m[p] = epoch
}

func (s epochSet) empty() bool {
	for _, m := range s {
		if len(m) > 0 {
			return false
		}
	}
	return true
}

// list renders the set as sorted topic partitions.
func (s epochSet) list() []TopicPartitions {
	a := Assignment{}
	for t, m := range s {
		for p := range m {
			a.add(t, p)
		}
	}
	return a.sorted()
}

// sameParts reports whether two sets hold the same partitions.
func sameParts(a, b epochSet) bool {
	n := 0
	for t, m := range a {
		for p := range m {
			if !b.has(t, p) {
				return false
			}
			n++
		}
	}
	for _, m := range b {
		n -= len(m)
	}
	return n == 0
}

// ownsAny reports whether owned (as reported by the client; nil: unknown)
// may still hold a partition of s. Unknown counts as yes.
func ownsAny(owned []TopicPartitions, s epochSet) bool {
	if owned == nil {
		return true
	}
	for _, tp := range owned {
		for _, p := range tp.Partitions {
			if s.has(tp.Topic, p) {
				return true
			}
		}
	}
	return false
}

// subsetOf reports whether every owned partition is in s (nil is not).
func subsetOf(owned []TopicPartitions, s epochSet) bool {
	if owned == nil {
		return false
	}
	for _, tp := range owned {
		for _, p := range tp.Partitions {
			if !s.has(tp.Topic, p) {
				return false
			}
		}
	}
	return true
}
