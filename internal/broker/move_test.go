package broker

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
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
	reach := &inProcess{}
	bs, closeAll := groupBrokersWith(t, dir, m, 3, reach)
	reach.bs = bs
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
	if err := bs[1].AppendGuest(ctx, name, []*storage.Record{{Queue: tp.All[0], Count: 1, Payload: []byte("x")}}, storage.AppendOptions{}); !errors.Is(err, model.ErrQueueMoved) {
		t.Fatalf("append in the new group before the move settled: %v", err)
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
	}
	check(bs)
	// A producer the new group does not know is looked up in the old one.
	guest := waitTopic(t, bs[1], name, func(tp *Topic) bool { return len(tp.Guests) == 1 })
	if ex, ok := bs[1].PriorProducerState(ctx, guest, 1, 42); !ok || ex.PID != 42 || !slices.Equal(reach.asked, []model.GroupID{0}) {
		t.Fatalf("prior producer state: %+v %v, asked %v", ex, ok, reach.asked)
	}
	if _, ok := bs[1].PriorProducerState(ctx, guest, 0, 42); ok {
		t.Fatal("a prior producer state for the group's own queue")
	}
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

	// The home group (RocketMQ clients' broker for it) appends and reads
	// it where its records are now.
	if offs, err := send(bs[0], 0, "e"); err != nil || offs[0] != 4 {
		t.Fatalf("append through the home group at %v (%v)", offs, err)
	}
	if start, _, end, err := bs[0].Offsets(name, 0); err != nil || start != 0 || end != 5 {
		t.Fatalf("offsets through the home group: %d..%d (%v)", start, end, err)
	}
	var bodies []string
	for off := model.QueueOffset(0); off < 5; {
		res, err := bs[0].Read(name, 0, off, storage.ReadOptions{MaxBytes: 1 << 20})
		if err != nil || len(res.Records) == 0 {
			t.Fatalf("read through the home group at %d: %v", off, err)
		}
		for _, r := range res.Records {
			m, err := DecodeMessage(r.Payload)
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, string(m.Body))
		}
		off = res.NextOffset
		res.Release()
	}
	if got := strings.Join(bodies, ""); got != "abcde" {
		t.Fatalf("read through the home group: %q", got)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	woke := make(chan error, 1)
	go func() { woke <- bs[0].Wait(wctx, []Watch{{Topic: name, Index: 0, Offset: 5}}) }()
	time.Sleep(50 * time.Millisecond)
	if _, err := send(bs[1], 1, "f"); err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil || wctx.Err() != nil {
		t.Fatalf("a wait through the home group did not wake: %v %v", err, wctx.Err())
	}
	wcancel()

	closeAll()
	bs, closeAll = groupBrokersWith(t, dir, m, 3, reach)
	reach.bs = bs
	defer closeAll()
	check(bs)
	if offs, err := send(bs[1], 1, "g"); err != nil || offs[0] != 6 {
		t.Fatalf("append after a restart at %v (%v)", offs, err)
	}

	// On to a third group: the middle piece stays in group 1, also across
	// a restart, and the home group reads all three pieces.
	if _, err := bs[0].BeginMove(ctx, name, 0, 2, nil); err != nil {
		t.Fatal(err)
	}
	end, last, err = bs[1].SealMoving(ctx, name, 0)
	if err != nil || end != 7 {
		t.Fatalf("sealed in group 1 at %d (%v)", end, err)
	}
	if base, err = bs[2].TakeMoving(ctx, name, 0, end, last); err != nil {
		t.Fatal(err)
	}
	if _, err := bs[0].SettleMove(ctx, name, 0, end, base); err != nil {
		t.Fatal(err)
	}
	waitTopic(t, bs[0], name, func(tp *Topic) bool { return tp.GroupOf(0) == 2 })
	if offs, err := send(bs[0], 0, "h"); err != nil || offs[0] != 7 {
		t.Fatalf("append through the home group after a second move at %v (%v)", offs, err)
	}
	closeAll()
	bs, closeAll = groupBrokersWith(t, dir, m, 3, reach)
	reach.bs = bs
	if _, _, _, err := bs[1].Engine().Offsets(tp.All[0]); err != nil {
		t.Fatalf("the middle piece is gone after a restart: %v", err)
	}
	var all []string
	for off := model.QueueOffset(0); off < 8; {
		res, err := bs[0].Read(name, 0, off, storage.ReadOptions{MaxBytes: 1 << 20})
		if err != nil || len(res.Records) == 0 {
			t.Fatalf("read through the home group at %d: %v", off, err)
		}
		for _, r := range res.Records {
			m, _ := DecodeMessage(r.Payload)
			all = append(all, string(m.Body))
		}
		off = res.NextOffset
		res.Release()
	}
	if got := strings.Join(all, ""); got != "abcdefgh" {
		t.Fatalf("three pieces read through the home group: %q", got)
	}
	// Deleting the topic deletes every piece.
	if err := bs[0].DeleteTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	for g, b := range bs {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, _, _, err := b.Engine().Offsets(tp.All[0]); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %d keeps the deleted topic's queue", g)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// inProcess is Elsewhere over brokers of one process (a member's calls to
// the groups' leaders, without the transport).
type inProcess struct {
	bs    []*Broker
	asked []model.GroupID // the groups ProducerState was asked of
}

func (p *inProcess) Append(ctx context.Context, g model.GroupID, topic model.TopicName, recs []*storage.Record, opts storage.AppendOptions) error {
	return p.bs[g].AppendGuest(ctx, topic, recs, opts)
}

func (p *inProcess) Read(_ context.Context, g model.GroupID, q model.QueueID, offset model.QueueOffset, opts storage.ReadOptions) (*storage.ReadResult, error) {
	return p.bs[g].ReadGuest(q, offset, opts)
}

func (p *inProcess) Offsets(_ context.Context, g model.GroupID, q model.QueueID) (start, hw, end, stable model.QueueOffset, err error) {
	return p.bs[g].GuestOffsets(q)
}

func (p *inProcess) ProducerState(_ context.Context, g model.GroupID, q model.QueueID, pid int64) (producers.Exported, bool, error) {
	p.asked = append(p.asked, g)
	return producers.Exported{PID: pid, Epoch: 1, Batches: []producers.Batch{{Epoch: 1, LastSeq: 4}}}, true, nil
}

func (p *inProcess) Wait(ctx context.Context, g model.GroupID, q model.QueueID, offset model.QueueOffset, stable bool) error {
	return p.bs[g].WaitGuest(ctx, q, offset, stable)
}
