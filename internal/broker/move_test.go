package broker

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// waitTopic waits until b's view of a topic satisfies ok.
func waitTopic(t *testing.T, b *Broker, name model.TopicName, ok func(*Topic) bool) *Topic {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tp, err := b.Topic(name); err == nil && ok(tp) {
			return tp
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the topic never reached the expected state", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMoveQueue: a queue moved to another group carries on there from the
// offset it ended at — its old group refuses appends from the move's start
// and still reads its history, its new group numbers on from the end and
// answers for it past its own queues, Kafka's index for it — and moves
// that cannot be made are refused; a restart sees the same.
func TestMoveQueue(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	bs, closeAll := groupBrokersOver(t, dir, m, 2)
	name, _ := model.ParseTopicName("moving")
	tp, err := bs[0].CreateWholeTopic(ctx, name, 2, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if tp.GroupOf(0) != 0 || tp.GroupOf(1) != 1 {
		t.Fatalf("placed in groups %d and %d", tp.GroupOf(0), tp.GroupOf(1))
	}
	send := func(b *Broker, index int32, body string) ([]model.QueueOffset, error) {
		return b.AppendMessages(ctx, name, index, []model.Message{{Topic: name, Body: []byte(body)}})
	}
	for _, body := range []string{"a", "b", "c"} {
		if _, err := send(bs[0], 0, body); err != nil {
			t.Fatal(err)
		}
	}
	waitTopic(t, bs[1], name, func(*Topic) bool { return true })

	if _, err := bs[0].BeginMove(ctx, name, 0, 1, func(g model.GroupID) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := send(bs[0], 0, "late"); !errors.Is(err, model.ErrQueueMoved) {
		t.Fatalf("append while moving: %v", err)
	}
	if _, err := bs[0].BeginMove(ctx, name, 0, 1, nil); !errors.Is(err, ErrMoveRefused) {
		t.Fatalf("second move while moving: %v", err)
	}
	end, last, err := bs[0].SealMoving(ctx, name, 0)
	if err != nil || end != 3 {
		t.Fatalf("sealed at %d (%v)", end, err)
	}
	base, err := bs[1].TakeMoving(ctx, name, 0, end, last)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs[1].SettleMove(ctx, name, 0, end, base); err != nil {
		t.Fatal(err)
	}

	check := func(bs []*Broker) {
		t.Helper()
		moved := waitTopic(t, bs[1], name, func(tp *Topic) bool { return len(tp.Guests) == 1 })
		if moved.GroupOf(0) != 1 || moved.HomeOf(0) != 0 {
			t.Fatalf("queue 0: group %d, home %d", moved.GroupOf(0), moved.HomeOf(0))
		}
		// Group 1's own queue (partition 1) is index 0 there; the guest
		// follows it.
		if moved.LocalIndex(0) != 1 || moved.LocalIndex(1) != 0 || moved.GlobalIndex(1, 1) != 0 || moved.GlobalIndex(1, 0) != 1 {
			t.Fatalf("indexes: %d %d %d %d", moved.LocalIndex(0), moved.LocalIndex(1), moved.GlobalIndex(1, 1), moved.GlobalIndex(1, 0))
		}
		old := waitTopic(t, bs[0], name, func(tp *Topic) bool { return tp.GroupOf(0) == 1 })
		if len(old.Queues) != 1 || !old.Away(0) {
			t.Fatalf("old group: queues %v, away %v", old.Queues, old.Away(0))
		}
		if _, err := send(bs[0], 0, "late"); !errors.Is(err, model.ErrQueueMoved) {
			t.Fatalf("append to the old group after the move: %v", err)
		}
		start, _, _, err := bs[0].Offsets(name, 0)
		if err != nil || start != 0 {
			t.Fatalf("old group's history: start %d (%v)", start, err)
		}
	}
	check(bs)
	offs, err := send(bs[1], 1, "d")
	if err != nil || offs[0] != 3 {
		t.Fatalf("first append in the new group at %v (%v)", offs, err)
	}
	if start, _, end, err := bs[1].Offsets(name, 1); err != nil || start != 3 || end != 4 {
		t.Fatalf("new group's piece: %d..%d (%v)", start, end, err)
	}
	// Epochs only grow across the move; the old group's end where the
	// new piece begins.
	if ep, err := bs[1].LeaderEpoch(name, 1); err != nil || ep != last+1 {
		t.Fatalf("epoch in the new group %d (%v), ended at %d", ep, err, last)
	}
	if ep, off, err := bs[1].EndOffsetForEpoch(name, 1, last); err != nil || ep != last || off != 3 {
		t.Fatalf("end of the old group's epoch: %d at %d (%v)", ep, off, err)
	}
	if ep, off, err := bs[1].EndOffsetForEpoch(name, 1, last+1); err != nil || ep != last+1 || off != 4 {
		t.Fatalf("end of the new group's epoch: %d at %d (%v)", ep, off, err)
	}
	for _, to := range []model.GroupID{1, 0} {
		if _, err := bs[1].BeginMove(ctx, name, 0, to, nil); !errors.Is(err, ErrMoveRefused) {
			t.Fatalf("move to group %d: %v", to, err)
		}
	}
	if _, err := bs[1].BeginMove(ctx, name, 5, 0, nil); !errors.Is(err, model.ErrUnknownQueue) {
		t.Fatalf("move of a queue the topic lacks: %v", err)
	}

	closeAll()
	bs, closeAll = groupBrokersOver(t, dir, m, 2)
	defer closeAll()
	check(bs)
	if offs, err := send(bs[1], 1, "e"); err != nil || offs[0] != 4 {
		t.Fatalf("append after a restart at %v (%v)", offs, err)
	}
}
