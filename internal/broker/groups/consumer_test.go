package groups

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// fakeTopics is a fixed topic set.
type fakeTopics struct {
	byName  map[string]TopicMeta
	version uint64
}

func newFakeTopics(parts map[string]int32) *fakeTopics {
	f := &fakeTopics{byName: map[string]TopicMeta{}, version: 1}
	i := byte(1)
	for name, n := range parts {
		f.byName[name] = TopicMeta{ID: TopicID{i}, Name: name, Partitions: n}
		i++
	}
	return f
}

func (f *fakeTopics) ByName(n string) (TopicMeta, bool) { t, ok := f.byName[n]; return t, ok }
func (f *fakeTopics) ByID(id TopicID) (TopicMeta, bool) {
	for _, t := range f.byName {
		if t.ID == id {
			return t, true
		}
	}
	return TopicMeta{}, false
}
func (f *fakeTopics) All() []TopicMeta {
	var out []TopicMeta
	for _, t := range f.byName {
		out = append(out, t)
	}
	return out
}
func (f *fakeTopics) Version() uint64 { return f.version }

func count(tps []TopicPartitions) int {
	n := 0
	for _, tp := range tps {
		n += len(tp.Partitions)
	}
	return n
}

func TestAssignUniformBalancedAndSticky(t *testing.T) {
	tm := TopicMeta{ID: TopicID{1}, Name: "t", Partitions: 16}
	members := []assignorMember{{id: "a", topics: []TopicMeta{tm}}, {id: "b", topics: []TopicMeta{tm}}}
	first := assignUniform(members)
	if len(first["a"][tm.ID])+len(first["b"][tm.ID]) != 16 || len(first["a"][tm.ID]) != 8 {
		t.Fatalf("first: %v", first)
	}
	members = append(members, assignorMember{id: "c", topics: []TopicMeta{tm}})
	members[0].prev, members[1].prev = first["a"], first["b"]
	second := assignUniform(members)
	for _, id := range []string{"a", "b"} {
		for _, p := range second[id][tm.ID] {
			found := false
			for _, q := range first[id][tm.ID] {
				found = found || p == q
			}
			if !found {
				t.Fatalf("%s gained partition %d: not sticky", id, p)
			}
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if n := len(second[id][tm.ID]); n < 5 || n > 6 {
			t.Fatalf("%s holds %d partitions, want 5 or 6", id, n)
		}
	}
}

func TestAssignUniformHeterogeneous(t *testing.T) {
	x := TopicMeta{ID: TopicID{1}, Name: "x", Partitions: 6}
	y := TopicMeta{ID: TopicID{2}, Name: "y", Partitions: 2}
	got := assignUniform([]assignorMember{{id: "a", topics: []TopicMeta{x, y}}, {id: "b", topics: []TopicMeta{x}}})
	if len(got["b"][y.ID]) != 0 {
		t.Fatal("b got a topic it does not subscribe to")
	}
	na, nb := len(got["a"][x.ID])+len(got["a"][y.ID]), len(got["b"][x.ID])
	if na != 4 || nb != 4 {
		t.Fatalf("loads %d and %d, want 4 and 4", na, nb)
	}
}

func TestAssignRange(t *testing.T) {
	x := TopicMeta{ID: TopicID{1}, Name: "x", Partitions: 7}
	got := assignRange([]assignorMember{{id: "b", topics: []TopicMeta{x}}, {id: "a", topics: []TopicMeta{x}}})
	if fmt.Sprint(got["a"][x.ID]) != "[0 1 2 3]" || fmt.Sprint(got["b"][x.ID]) != "[4 5 6]" {
		t.Fatalf("range: %v", got)
	}
}

func hb(group, member string, epoch int32, owned []TopicPartitions) ConsumerHeartbeat {
	h := ConsumerHeartbeat{Group: group, MemberID: member, MemberEpoch: epoch, RebalanceTimeout: -1, Owned: owned}
	if epoch == 0 {
		h.RebalanceTimeout = time.Minute
		h.SubscribedTopicNames = []string{"t"}
		h.Owned = []TopicPartitions{}
	}
	return h
}

// TestRevokeBeforeReassign: a partition moves to a new member only after its
// previous owner reports having released it; the old owner keeps the rest.
func TestRevokeBeforeReassign(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	topics := newFakeTopics(map[string]int32{"t": 4})
	tid := topics.byName["t"].ID
	a, err := c.ConsumerGroupHeartbeat(topics, hb("g", "a", 0, nil))
	if err != nil || count(a.Assignment) != 4 {
		t.Fatalf("a joins: %+v %v", a, err)
	}
	b, err := c.ConsumerGroupHeartbeat(topics, hb("g", "b", 0, nil))
	if err != nil || count(b.Assignment) != 0 {
		t.Fatalf("b joins: %+v %v (nothing until a releases)", b, err)
	}
	all := []TopicPartitions{{Topic: tid, Partitions: []int32{0, 1, 2, 3}}}
	a2, err := c.ConsumerGroupHeartbeat(topics, hb("g", "a", a.MemberEpoch, all))
	if err != nil || count(a2.Assignment) != 2 || a2.MemberEpoch != a.MemberEpoch {
		t.Fatalf("a told to revoke: %+v %v", a2, err)
	}
	// b still waits: a has not confirmed.
	b2, err := c.ConsumerGroupHeartbeat(topics, hb("g", "b", b.MemberEpoch, []TopicPartitions{}))
	if err != nil || count(b2.Assignment) != 0 {
		t.Fatalf("b before release: %+v %v", b2, err)
	}
	a3, err := c.ConsumerGroupHeartbeat(topics, hb("g", "a", a2.MemberEpoch, a2.Assignment))
	if err != nil || a3.MemberEpoch <= a.MemberEpoch {
		t.Fatalf("a confirms: %+v %v", a3, err)
	}
	b3, err := c.ConsumerGroupHeartbeat(topics, hb("g", "b", b2.MemberEpoch, []TopicPartitions{}))
	if err != nil || count(b3.Assignment) != 2 {
		t.Fatalf("b after release: %+v %v", b3, err)
	}
	// A stale epoch is fenced; an old epoch commit for an owned partition is fine.
	if _, err := c.ConsumerGroupHeartbeat(topics, hb("g", "a", a3.MemberEpoch+5, nil)); !errors.Is(err, ErrFencedMemberEpoch) {
		t.Fatalf("future epoch: %v", err)
	}
	if err := c.CheckCommit("g", "b", "", b3.MemberEpoch+1, nil); !errors.Is(err, ErrStaleMemberEpoch) {
		t.Fatalf("commit with a future epoch: %v", err)
	}
	if err := c.CheckCommit("g", "a", "", a.MemberEpoch, a3.Assignment); err != nil {
		t.Fatalf("commit with an older epoch for kept partitions: %v", err)
	}
	if err := c.CheckCommit("g", "zz", "", 1, nil); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("unknown member commit: %v", err)
	}
	d, err := c.DescribeConsumerGroup("g")
	if err != nil || len(d.Members) != 2 || d.State != ConsumerStable {
		t.Fatalf("describe: %+v %v", d, err)
	}
	// Leaving frees a's partitions for b.
	if _, err := c.ConsumerGroupHeartbeat(topics, hb("g", "a", -1, nil)); err != nil {
		t.Fatal(err)
	}
	b4, err := c.ConsumerGroupHeartbeat(topics, hb("g", "b", b3.MemberEpoch, b3.Assignment))
	if err != nil || count(b4.Assignment) != 4 {
		t.Fatalf("b after a left: %+v %v", b4, err)
	}
	// A classic join of a group with consumer members is refused.
	if _, err := c.Join(t.Context(), JoinRequest{Group: "g", ProtocolType: "consumer", SessionTimeout: 10 * time.Second,
		Protocols: []Protocol{{Name: "range"}}}); err == nil {
		t.Fatal("classic join of a consumer group accepted")
	}
}

// TestStaticMemberRejoin: a static member leaving with epoch -2 and coming
// back under a new member id gets its assignment back.
func TestStaticMemberRejoin(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	topics := newFakeTopics(map[string]int32{"t": 3})
	inst := "i1"
	h := hb("g", "m1", 0, nil)
	h.InstanceID = &inst
	r, err := c.ConsumerGroupHeartbeat(topics, h)
	if err != nil || count(r.Assignment) != 3 {
		t.Fatalf("join: %+v %v", r, err)
	}
	h2 := hb("g", "m2", 0, nil)
	h2.InstanceID = &inst
	if _, err := c.ConsumerGroupHeartbeat(topics, h2); !errors.Is(err, ErrUnreleasedInstanceID) {
		t.Fatalf("second holder of the instance: %v", err)
	}
	leave := hb("g", "m1", -2, nil)
	leave.InstanceID = &inst
	if _, err := c.ConsumerGroupHeartbeat(topics, leave); err != nil {
		t.Fatal(err)
	}
	r2, err := c.ConsumerGroupHeartbeat(topics, h2)
	if err != nil || count(r2.Assignment) != 3 || r2.MemberEpoch != r.MemberEpoch || r2.MemberID != "m2" {
		t.Fatalf("rejoin: %+v %v", r2, err)
	}
}

func TestHeartbeatValidation(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	topics := newFakeTopics(map[string]int32{"t": 1})
	bad := hb("g", "m", 0, nil)
	bad.Owned = []TopicPartitions{{Topic: TopicID{1}, Partitions: []int32{0}}}
	if _, err := c.ConsumerGroupHeartbeat(topics, bad); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("join with owned partitions: %v", err)
	}
	as := "cooperative-sticky"
	bad = hb("g", "m", 0, nil)
	bad.ServerAssignor = &as
	if _, err := c.ConsumerGroupHeartbeat(topics, bad); !errors.Is(err, ErrUnsupportedAssignor) {
		t.Fatalf("unknown assignor: %v", err)
	}
	re := "(["
	bad = hb("g", "m", 0, nil)
	bad.SubscribedTopicNames, bad.SubscribedTopicRegex = nil, &re
	if _, err := c.ConsumerGroupHeartbeat(topics, bad); !errors.Is(err, ErrInvalidRegex) {
		t.Fatalf("bad regex: %v", err)
	}
	if _, err := c.ConsumerGroupHeartbeat(topics, hb("g2", "m", 3, nil)); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("heartbeat to an unknown group: %v", err)
	}
	good := "t.*"
	h := hb("g3", "m", 0, nil)
	h.SubscribedTopicNames, h.SubscribedTopicRegex = nil, &good
	r, err := c.ConsumerGroupHeartbeat(topics, h)
	if err != nil || count(r.Assignment) != 1 {
		t.Fatalf("regex subscription: %+v %v", r, err)
	}
}
