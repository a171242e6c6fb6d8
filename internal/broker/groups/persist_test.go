package groups

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// imageStore is a Persist target: the latest image of each group.
type imageStore struct {
	mu     sync.Mutex
	images map[string][]byte
	writes int
}

func (s *imageStore) persist(_ context.Context, group string, image []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if image == nil {
		delete(s.images, group)
	} else {
		s.images[group] = image
	}
	return nil
}

// settled waits until the writer has handed over everything noted.
func (s *imageStore) settled(t *testing.T, c *Coordinator, want func(map[string][]byte) bool) map[string][]byte {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		ok := want(s.images)
		out := map[string][]byte{}
		for k, v := range s.images {
			out[k] = v
		}
		s.mu.Unlock()
		if ok {
			return out
		}
	}
	t.Fatal("images not written")
	return nil
}

// TestClassicGroupRestored: a stable classic group's generation, members
// and assignments come back in a new coordinator: heartbeats, commits and
// a follower's rejoin carry on with the same generation, no rebalance.
func TestClassicGroupRestored(t *testing.T) {
	store := &imageStore{images: map[string][]byte{}}
	c := New(Options{Persist: store.persist, InitialRebalanceDelay: 300 * time.Millisecond})
	defer c.Close()
	join := func(c *Coordinator, member string) JoinResult {
		t.Helper()
		res, err := c.Join(t.Context(), JoinRequest{Group: "g", MemberID: member, ClientID: "cl", ProtocolType: "consumer",
			SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Second, Protocols: []Protocol{{Name: "range", Metadata: []byte("m")}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var a, b JoinResult
	var wg sync.WaitGroup
	wg.Go(func() { a = join(c, "") })
	wg.Go(func() { b = join(c, "") })
	wg.Wait()
	leader, follower := a, b
	if b.MemberID == a.Leader {
		leader, follower = b, a
	}
	assignments := map[string][]byte{leader.MemberID: []byte("L"), follower.MemberID: []byte("F")}
	if _, _, err := c.Sync(t.Context(), "g", leader.MemberID, "", leader.Generation, assignments); err != nil {
		t.Fatal(err)
	}
	images := store.settled(t, c, func(m map[string][]byte) bool { return m["g"] != nil })

	c2 := New(Options{})
	defer c2.Close()
	if n, bad := c2.Restore(images); n != 1 || bad != 0 {
		t.Fatalf("restored %d, skipped %d", n, bad)
	}
	if err := c2.Heartbeat("g", follower.MemberID, "", follower.Generation); err != nil {
		t.Fatalf("heartbeat after restore: %v", err)
	}
	if err := c2.CheckCommit("g", leader.MemberID, "", leader.Generation, nil); err != nil {
		t.Fatalf("commit after restore: %v", err)
	}
	got, proto, err := c2.Sync(t.Context(), "g", follower.MemberID, "", follower.Generation, nil)
	if err != nil || string(got) != "F" || proto != "range" {
		t.Fatalf("sync after restore: %q %q %v", got, proto, err)
	}
	again := join(c2, follower.MemberID)
	if again.Generation != follower.Generation {
		t.Fatalf("follower rejoin: generation %d, want %d (no rebalance)", again.Generation, follower.Generation)
	}
	if d := c2.Describe("g"); d.State != Stable || len(d.Members) != 2 {
		t.Fatalf("describe after restore: %+v", d)
	}
	if err := c2.Heartbeat("g", "stranger", "", follower.Generation); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("unknown member: %v", err)
	}

	// Once every member left, the group's empty image replaces it.
	for _, m := range []string{leader.MemberID, follower.MemberID} {
		if errs := c.Leave("g", []LeaveMember{{MemberID: m}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	store.settled(t, c, func(m map[string][]byte) bool {
		d, err := decodeImage("g", m["g"])
		return err == nil && d.classic != nil && d.classic.state == Empty
	})
	if err := c.Delete("g"); err != nil {
		t.Fatal(err)
	}
	store.settled(t, c, func(m map[string][]byte) bool { return m["g"] == nil })
}

// TestConsumerGroupRestored: a consumer group's epochs and assignments
// come back in a new coordinator: members heartbeat on at their epochs and
// keep their partitions.
func TestConsumerGroupRestored(t *testing.T) {
	store := &imageStore{images: map[string][]byte{}}
	c := New(Options{Persist: store.persist})
	defer c.Close()
	topics := newFakeTopics(map[string]int32{"t": 4})
	a, err := c.ConsumerGroupHeartbeat(topics, hb("g", "a", 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ConsumerGroupHeartbeat(topics, hb("g", "b", 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	// Reconcile to stable: a releases two partitions, b takes them.
	beat := func(prev ConsumerHeartbeatResult) ConsumerHeartbeatResult {
		t.Helper()
		got, err := c.ConsumerGroupHeartbeat(topics, hb("g", prev.MemberID, prev.MemberEpoch, prev.Assignment))
		if err != nil {
			t.Fatal(err)
		}
		if got.Assignment == nil {
			got.Assignment = prev.Assignment
		}
		return got
	}
	for range 3 {
		a, b = beat(a), beat(b)
	}
	if count(a.Assignment) != 2 || count(b.Assignment) != 2 {
		t.Fatalf("not reconciled: a %+v b %+v", a, b)
	}
	images := store.settled(t, c, func(m map[string][]byte) bool {
		d, err := decodeImage("g", m["g"])
		return err == nil && d.consumer != nil && d.consumer.members["b"] != nil && !d.consumer.members["b"].assigned.empty()
	})
	store.mu.Lock()
	writes := store.writes
	store.mu.Unlock()
	// A heartbeat that changes nothing writes nothing.
	beat(a)
	time.Sleep(20 * time.Millisecond)
	store.mu.Lock()
	if store.writes != writes {
		t.Errorf("an unchanged heartbeat wrote the image again")
	}
	store.mu.Unlock()

	c2 := New(Options{})
	defer c2.Close()
	if n, bad := c2.Restore(images); n != 1 || bad != 0 {
		t.Fatalf("restored %d, skipped %d", n, bad)
	}
	for _, m := range []ConsumerHeartbeatResult{a, b} {
		got, err := c2.ConsumerGroupHeartbeat(topics, hb("g", m.MemberID, m.MemberEpoch, m.Assignment))
		if err != nil || got.MemberEpoch != m.MemberEpoch || got.Assignment != nil {
			t.Fatalf("heartbeat of %s after restore: %+v %v (want epoch %d, no new assignment)", m.MemberID, got, err, m.MemberEpoch)
		}
		if err := c2.CheckCommit("g", m.MemberID, "", m.MemberEpoch, m.Assignment); err != nil {
			t.Fatalf("commit of %s after restore: %v", m.MemberID, err)
		}
	}
	if d, err := c2.DescribeConsumerGroup("g"); err != nil || d.State != ConsumerStable || len(d.Members) != 2 {
		t.Fatalf("describe after restore: %+v %v", d, err)
	}
}

// TestRestoreSkipsBadImages: an image that does not decode leaves its
// group empty; the others are restored.
func TestRestoreSkipsBadImages(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	n, bad := c.Restore(map[string][]byte{"x": {9, 9}, "y": {imageClassic, 0, 1, 0, 0, 0}})
	if n != 0 || bad != 2 {
		t.Fatalf("restored %d, skipped %d", n, bad)
	}
}

// FuzzDecodeImage: any bytes decode to a group or an error, never a panic,
// and what decodes encodes back to itself.
func FuzzDecodeImage(f *testing.F) {
	g := &group{state: Stable, generation: 3, protocolType: "consumer", protocol: "range", leader: "a",
		members: map[string]*member{"a": {id: "a", protocols: []Protocol{{Name: "range", Metadata: []byte{1}}}, assignment: []byte{2}}}}
	f.Add(g.imageLocked())
	cg := &consumerGroup{epoch: 2, assignmentEpoch: 2, assignor: AssignorUniform,
		members: map[string]*cmember{"m": {id: "m", epoch: 2, topicNames: []string{"t"}, assigned: epochSet{{1}: {0: 2}}, pending: epochSet{}}},
		target:  map[string]Assignment{"m": {{1}: {0}}}}
	f.Add(cg.image())
	f.Add([]byte{imageConsumer})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeImage("g", b)
		if err != nil {
			return
		}
		var again []byte
		if d.classic != nil {
			again = d.classic.imageLocked()
		} else {
			again = d.consumer.image()
		}
		if d2, err := decodeImage("g", again); err != nil || (d2.classic == nil) != (d.classic == nil) {
			t.Fatalf("re-encoded image does not decode: %v", err)
		}
	})
}

// gatedStore is a Persist target whose writes wait for release and then
// fail or succeed as told.
type gatedStore struct {
	release chan error
}

func (s *gatedStore) persist(ctx context.Context, _ string, _ []byte) error {
	select {
	case err := <-s.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestAwaitDurable: a request that changed a group waits until an image
// holding the change is written, gets ErrStateNotDurable when the write
// fails or the coordinator closes, and waits for nothing when nothing is
// pending.
func TestAwaitDurable(t *testing.T) {
	store := &gatedStore{release: make(chan error)}
	c := New(Options{Persist: store.persist})
	topics := newFakeTopics(map[string]int32{"t": 2})
	if err := c.AwaitDurable(t.Context(), "g"); err != nil {
		t.Fatalf("nothing pending: %v", err)
	}
	if _, err := c.ConsumerGroupHeartbeat(topics, hb("g", "a", 0, nil)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.AwaitDurable(t.Context(), "g") }()
	select {
	case err := <-done:
		t.Fatalf("returned before the write: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	store.release <- nil
	if err := <-done; err != nil {
		t.Fatalf("after the write: %v", err)
	}

	if _, err := c.ConsumerGroupHeartbeat(topics, hb("g", "b", 0, nil)); err != nil {
		t.Fatal(err)
	}
	go func() { done <- c.AwaitDurable(t.Context(), "g") }()
	store.release <- errors.New("no quorum")
	if err := <-done; !errors.Is(err, ErrStateNotDurable) {
		t.Fatalf("after a failed write: %v", err)
	}

	// A change superseded by the group's removal is durable once the
	// removal is (every write now succeeds).
	feeding, fed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(fed)
		for {
			select {
			case store.release <- nil:
			case <-feeding:
				return
			}
		}
	}()
	c.noteImage("x", []byte{1}, false)
	if err := c.AwaitDurable(t.Context(), "x"); err != nil {
		t.Fatal(err)
	}
	c.noteImage("x", []byte{2}, false)
	c.noteImage("x", nil, true)
	if err := c.AwaitDurable(t.Context(), "x"); err != nil {
		t.Fatalf("after the removal was written: %v", err)
	}
	close(feeding)
	<-fed

	if _, err := c.ConsumerGroupHeartbeat(topics, hb("g", "c", 0, nil)); err != nil {
		t.Fatal(err)
	}
	go func() { done <- c.AwaitDurable(t.Context(), "g") }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	if err := <-done; !errors.Is(err, ErrStateNotDurable) {
		t.Fatalf("after close: %v", err)
	}
}
