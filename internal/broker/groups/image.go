package groups

// Group images: what the coordinator persists of each group, so that the
// coordinator that takes over (a new leader of the group's replication
// group, or the node after a restart) carries on with the same generation,
// members and assignments, as Kafka's group metadata records in
// __consumer_offsets let it: members keep consuming and committing without
// a rebalance. A classic group is imaged when it is Stable or Empty (the
// image of a group in a rebalance stays the last stable one: its members
// are rejoining anyway); a consumer group after every change of its epochs,
// members or assignments. Session clocks are not imaged: every restored
// member starts a fresh session.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"time"
)

// ErrBadImage is a group image that does not decode.
var ErrBadImage = errors.New("bad group image")

const (
	imageClassic  = 1
	imageConsumer = 2
	imageShare    = 3
)

var le = binary.LittleEndian

// imageWriter appends the fields of an image.
type imageWriter struct{ b []byte }

func (w *imageWriter) u8(v byte)      { w.b = append(w.b, v) }
func (w *imageWriter) i32(v int32)    { w.b = le.AppendUint32(w.b, uint32(v)) }
func (w *imageWriter) u32(v int)      { w.b = le.AppendUint32(w.b, uint32(v)) }
func (w *imageWriter) i64(v int64)    { w.b = le.AppendUint64(w.b, uint64(v)) }
func (w *imageWriter) bytes(v []byte) { w.u32(len(v)); w.b = append(w.b, v...) }
func (w *imageWriter) str(v string)   { w.u32(len(v)); w.b = append(w.b, v...) }

// imageReader reads the fields of an image with a sticky error.
type imageReader struct {
	b   []byte
	err error
}

func (r *imageReader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		if r.err == nil {
			r.err = fmt.Errorf("%w: truncated", ErrBadImage)
		}
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *imageReader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *imageReader) i32() int32 {
	if v := r.take(4); v != nil {
		return int32(le.Uint32(v))
	}
	return 0
}

func (r *imageReader) i64() int64 {
	if v := r.take(8); v != nil {
		return int64(le.Uint64(v))
	}
	return 0
}

// count reads a count of items at least min bytes each, checking it fits.
func (r *imageReader) count(min int) int {
	n := int(uint32(r.i32()))
	if r.err == nil && n*min > len(r.b) {
		r.err = fmt.Errorf("%w: count %d", ErrBadImage, n)
		return 0
	}
	return n
}

func (r *imageReader) bytes() []byte { return slices.Clone(r.take(r.count(1))) }
func (r *imageReader) str() string   { return string(r.take(r.count(1))) }

func (w *imageWriter) epochs(s epochSet) {
	topics := make([]TopicID, 0, len(s))
	for t := range s {
		topics = append(topics, t)
	}
	sort.Slice(topics, func(i, j int) bool { return string(topics[i][:]) < string(topics[j][:]) })
	w.u32(len(topics))
	for _, t := range topics {
		w.b = append(w.b, t[:]...)
		parts := slices.Sorted(maps.Keys(s[t]))
		w.u32(len(parts))
		for _, p := range parts {
			w.i32(p)
			w.i32(s[t][p])
		}
	}
}

func (r *imageReader) epochs() epochSet {
	s := epochSet{}
	for range r.count(20) {
		var t TopicID
		copy(t[:], r.take(16))
		for range r.count(8) {
			p, e := r.i32(), r.i32()
			s.put(t, p, e)
		}
	}
	return s
}

func (w *imageWriter) assignment(a Assignment) {
	list := a.sorted()
	w.u32(len(list))
	for _, tp := range list {
		w.b = append(w.b, tp.Topic[:]...)
		w.u32(len(tp.Partitions))
		for _, p := range tp.Partitions {
			w.i32(p)
		}
	}
}

func (r *imageReader) assignment() Assignment {
	a := Assignment{}
	for range r.count(20) {
		var t TopicID
		copy(t[:], r.take(16))
		n := r.count(4)
		parts := make([]int32, 0, n)
		for range n {
			parts = append(parts, r.i32())
		}
		a[t] = parts
	}
	return a
}

// imageLocked is the classic group's image, or nil while it rebalances
// (g.mu held).
func (g *group) imageLocked() []byte {
	var state byte
	switch g.state {
	case Empty:
		state = 0
	case Stable:
		state = 1
	default:
		return nil
	}
	w := &imageWriter{}
	w.u8(imageClassic)
	w.u8(state)
	w.i32(g.generation)
	w.str(g.protocolType)
	w.str(g.protocol)
	w.str(g.leader)
	ids := slices.Sorted(maps.Keys(g.members))
	w.u32(len(ids))
	for _, id := range ids {
		m := g.members[id]
		w.str(m.id)
		w.str(m.instanceID)
		w.str(m.clientID)
		w.str(m.clientHost)
		w.i64(m.sessionTimeout.Milliseconds())
		w.i64(m.rebalanceTimeout.Milliseconds())
		w.u32(len(m.protocols))
		for _, p := range m.protocols {
			w.str(p.Name)
			w.bytes(p.Metadata)
		}
		w.bytes(m.assignment)
	}
	return w.b
}

// image is the consumer group's image (c.mu held).
func (g *consumerGroup) image() []byte {
	w := &imageWriter{}
	w.u8(imageConsumer)
	w.i32(g.epoch)
	w.i32(g.assignmentEpoch)
	w.str(g.assignor)
	w.str(g.topicsSig)
	ids := slices.Sorted(maps.Keys(g.members))
	w.u32(len(ids))
	for _, id := range ids {
		m := g.members[id]
		w.str(m.id)
		w.str(m.instanceID)
		w.str(m.rackID)
		w.str(m.clientID)
		w.str(m.clientHost)
		w.i32(m.epoch)
		w.i32(m.prevEpoch)
		w.u8(byte(m.state))
		left := byte(0)
		if m.leftStatic {
			left = 1
		}
		w.u8(left)
		w.u32(len(m.topicNames))
		for _, t := range m.topicNames {
			w.str(t)
		}
		w.str(m.regex)
		w.str(m.assignor)
		w.i64(m.rebalanceTimeout.Milliseconds())
		w.epochs(m.assigned)
		w.epochs(m.pending)
	}
	targets := slices.Sorted(maps.Keys(g.target))
	w.u32(len(targets))
	for _, id := range targets {
		w.str(id)
		w.assignment(g.target[id])
	}
	return w.b
}

// image is the share group's image (c.mu held).
func (g *shareGroup) image() []byte {
	w := &imageWriter{}
	w.u8(imageShare)
	w.i32(g.epoch)
	w.i32(g.assignmentEpoch)
	w.str(g.topicsSig)
	ids := slices.Sorted(maps.Keys(g.members))
	w.u32(len(ids))
	for _, id := range ids {
		m := g.members[id]
		w.str(m.id)
		w.str(m.rackID)
		w.str(m.clientID)
		w.str(m.clientHost)
		w.i32(m.epoch)
		w.u32(len(m.topicNames))
		for _, t := range m.topicNames {
			w.str(t)
		}
		w.assignment(m.assigned)
	}
	return w.b
}

// decodeShare reads a share group's image after its kind.
func decodeShare(id string, r *imageReader) *shareGroup {
	g := &shareGroup{id: id, members: map[string]*smember{}}
	g.epoch, g.assignmentEpoch = r.i32(), r.i32()
	g.topicsSig = r.str()
	for range r.count(8) {
		m := &smember{id: r.str(), rackID: r.str(), clientID: r.str(), clientHost: r.str(), sent: true}
		m.epoch = r.i32()
		for range r.count(4) {
			m.topicNames = append(m.topicNames, r.str())
		}
		m.assigned = r.assignment()
		g.members[m.id] = m
	}
	return g
}

// decodedImage is a decoded image: one of the three groups.
type decodedImage struct {
	classic  *group
	consumer *consumerGroup
	share    *shareGroup
}

// decodeImage parses an image into a group not yet armed (no timers).
func decodeImage(id string, b []byte) (decodedImage, error) {
	r := &imageReader{b: b}
	var out decodedImage
	switch r.u8() {
	case imageClassic:
		g := &group{id: id, members: map[string]*member{}, instances: map[string]string{}}
		g.state = Empty
		if r.u8() == 1 {
			g.state = Stable
		}
		g.generation = r.i32()
		g.protocolType, g.protocol, g.leader = r.str(), r.str(), r.str()
		for range r.count(8) {
			m := &member{id: r.str(), instanceID: r.str(), clientID: r.str(), clientHost: r.str()}
			m.sessionTimeout = time.Duration(r.i64()) * time.Millisecond
			m.rebalanceTimeout = time.Duration(r.i64()) * time.Millisecond
			for range r.count(8) {
				m.protocols = append(m.protocols, Protocol{Name: r.str(), Metadata: r.bytes()})
			}
			m.assignment = r.bytes()
			g.members[m.id] = m
			if m.instanceID != "" {
				g.instances[m.instanceID] = m.id
			}
		}
		out.classic = g
	case imageConsumer:
		g := &consumerGroup{id: id, members: map[string]*cmember{}, instances: map[string]string{},
			target: map[string]Assignment{}, owners: map[partitionRef]string{}}
		g.epoch, g.assignmentEpoch = r.i32(), r.i32()
		g.assignor, g.topicsSig = r.str(), r.str()
		for range r.count(8) {
			m := &cmember{id: r.str(), instanceID: r.str(), rackID: r.str(), clientID: r.str(), clientHost: r.str()}
			m.epoch, m.prevEpoch = r.i32(), r.i32()
			m.state = memberState(r.u8())
			m.leftStatic = r.u8() == 1
			for range r.count(4) {
				m.topicNames = append(m.topicNames, r.str())
			}
			m.regex, m.assignor = r.str(), r.str()
			m.rebalanceTimeout = time.Duration(r.i64()) * time.Millisecond
			m.assigned, m.pending = r.epochs(), r.epochs()
			if m.regex != "" && r.err == nil {
				re, err := regexp.Compile("^(?:" + m.regex + ")$")
				if err != nil {
					return out, fmt.Errorf("%w: member %s regex: %v", ErrBadImage, m.id, err)
				}
				m.compiled = re
			}
			if m.state > stateUnreleased {
				r.err = fmt.Errorf("%w: member state %d", ErrBadImage, m.state)
			}
			g.members[m.id] = m
			if m.instanceID != "" {
				g.instances[m.instanceID] = m.id
			}
		}
		for range r.count(8) {
			mid := r.str()
			g.target[mid] = r.assignment()
		}
		for _, m := range g.members {
			g.claimOwnership(m)
		}
		out.consumer = g
	case imageShare:
		out.share = decodeShare(id, r)
	default:
		if r.err == nil {
			r.err = fmt.Errorf("%w: unknown kind", ErrBadImage)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrBadImage, len(r.b))
	}
	return out, r.err
}
