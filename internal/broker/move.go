package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/model"
)

// Moving a queue to another replication group without copying its
// history (route.Moves). The steps, each safe to repeat:
//
//  1. BeginMove records the move in the topic (its new piece "moving"):
//     every broker of the queue's group refuses appends to it from then on.
//  2. SealMoving, at the leader of the group the queue is in, seals the
//     storage queue — the exact end, also against appends that read the
//     topic before step 1 — and returns that end and the queue's epoch.
//  3. TakeMoving, at the leader of the group it goes to, creates the
//     storage queue there starting at that end, and returns the epoch
//     base that keeps the queue's leader epochs growing.
//  4. SettleMove records the piece's offset and epoch base: the queue
//     takes appends in its new group, where Kafka clients find it.
//
// AbandonMove drops a move not yet settled (the old group's queue is
// unsealed by the caller).

// BeginMove records that queue i of a topic moves to group to. It refuses
// an unknown topic or queue, an internal topic, a move to the group the
// queue is in or was in before (its storage queue there ended), and a
// queue already moving; check, when set, refuses a group that cannot
// take it (none such, no leader).
func (b *Broker) BeginMove(ctx context.Context, name model.TopicName, i int, to model.GroupID, check func(model.GroupID) error) (*Topic, error) {
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", model.ErrUnknownTopic, name)
	}
	if t.Internal {
		return nil, fmt.Errorf("%w: %s is internal; its queues stay in their groups", model.ErrInvalidConfig, name)
	}
	if i < 0 || i >= len(t.All) {
		return nil, fmt.Errorf("%w: %s queue %d of %d", model.ErrUnknownQueue, name, i, len(t.All))
	}
	if t.Moves.Moving(i) {
		return nil, fmt.Errorf("%w: %s queue %d is still moving", ErrMoveRefused, name, i)
	}
	for _, p := range t.Moves.Chain(t.Groups, i) {
		if p.Group == to {
			if t.GroupOf(i) == to {
				return nil, fmt.Errorf("%w: %s queue %d is in group %d already", ErrMoveRefused, name, i, to)
			}
			return nil, fmt.Errorf("%w: %s queue %d was in group %d before; it moves only to groups it was never in", ErrMoveRefused, name, i, to)
		}
	}
	if check != nil {
		if err := check(to); err != nil {
			return nil, err
		}
	}
	nt := *t
	nt.Moves = t.Moves.With(i, route.Piece{Group: to, From: route.PieceMoving})
	b.view(&nt)
	if err := b.saveTopicLocked(ctx, &nt, t.revision); err != nil {
		return nil, err
	}
	b.log.Info("queue move begun", "topic", name.String(), "queue", i, "from", t.GroupOf(i), "to", to)
	return &nt, nil
}

// ErrMoveRefused is a queue move that cannot be made as asked.
var ErrMoveRefused = fmt.Errorf("%w: queue move refused", model.ErrInvalidConfig)

// ErrMoveBusy is a queue that cannot be sealed now: a Kafka transaction
// is open in it (its markers go where the queue is when it ends). The
// move is tried again.
var ErrMoveBusy = fmt.Errorf("%w: a transaction is open in the queue", ErrMoveRefused)

// SealMoving closes queue i of a topic to appends in this broker's group,
// where it takes them now, and returns the offset it ended at and the
// leader epoch it ended in. A queue with a Kafka transaction open is
// opened again and refused with ErrMoveBusy.
func (b *Broker) SealMoving(ctx context.Context, name model.TopicName, i int) (model.QueueOffset, model.Epoch, error) {
	t, err := b.storedTopic(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	if i < 0 || i >= len(t.All) || t.GroupOf(i) != b.opts.Placement.Group {
		return 0, 0, fmt.Errorf("%w: %s queue %d does not take appends in group %d", ErrMoveRefused, name, i, b.opts.Placement.Group)
	}
	end, err := b.engine.SealQueue(ctx, t.All[i])
	if err != nil {
		return 0, 0, err
	}
	if x := b.KafkaTxns(); x != nil {
		if open := x.Open(t.All[i]); len(open) > 0 {
			if err := b.engine.UnsealQueue(ctx, t.All[i]); err != nil {
				return 0, 0, err
			}
			return 0, 0, fmt.Errorf("%w (%d producers)", ErrMoveBusy, len(open))
		}
	}
	return end, t.EpochBase(i) + b.engine.LeaderEpoch(), nil
}

// UnsealMoving opens queue i again in this broker's group (a move given
// up).
func (b *Broker) UnsealMoving(ctx context.Context, name model.TopicName, i int) error {
	t, err := b.Topic(name)
	if err != nil {
		return err
	}
	if i < 0 || i >= len(t.All) {
		return fmt.Errorf("%w: %s queue %d", model.ErrUnknownQueue, name, i)
	}
	return b.engine.UnsealQueue(ctx, t.All[i])
}

// TakeMoving makes queue i's storage queue in this broker's group, its
// offsets going on from end, and returns the epoch base that makes its
// epochs here follow last, the epoch it ended in where it was.
func (b *Broker) TakeMoving(ctx context.Context, name model.TopicName, i int, end model.QueueOffset, last model.Epoch) (model.Epoch, error) {
	t, err := b.storedTopic(ctx, name)
	if err != nil {
		return 0, err
	}
	if i < 0 || i >= len(t.All) {
		return 0, fmt.Errorf("%w: %s queue %d", model.ErrUnknownQueue, name, i)
	}
	if err := b.engine.CreateQueueAt(ctx, t.All[i], end); err != nil {
		return 0, err
	}
	return max(0, last+1-b.engine.LeaderEpoch()), nil
}

// SettleMove records that queue i's move took it from offset from on with
// epoch base base, or — from route.PieceMoving — that it was given up.
func (b *Broker) SettleMove(ctx context.Context, name model.TopicName, i int, from model.QueueOffset, base model.Epoch) (*Topic, error) {
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	for range 5 {
		// The stored version: this broker's view may not have the move yet.
		if err := b.adoptStoredLocked(ctx, name); err != nil {
			return nil, err
		}
		t, ok := b.topics[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s", model.ErrUnknownTopic, name)
		}
		if !t.Moves.Moving(i) {
			return t, nil // settled already
		}
		nt := *t
		nt.Moves = t.Moves.Settled(i, from, base)
		b.view(&nt)
		err := b.saveTopicLocked(ctx, &nt, t.revision)
		if err == nil {
			b.log.Info("queue move settled", "topic", name.String(), "queue", i, "group", nt.GroupOf(i), "from", from)
			return &nt, nil
		}
		if !errors.Is(err, model.ErrTopicExists) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: %s changed while settling a move", model.ErrTopicExists, name)
}

// storedTopic is a topic as the metadata store has it now (this broker's
// view may lag a change another broker made).
func (b *Broker) storedTopic(ctx context.Context, name model.TopicName) (*Topic, error) {
	b.topicMu.Lock()
	defer b.topicMu.Unlock()
	if err := b.adoptStoredLocked(ctx, name); err != nil {
		return nil, err
	}
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", model.ErrUnknownTopic, name)
	}
	return t, nil
}

// EpochBase is what queue i's leader epochs add to its group's epoch (the
// group GroupOf names): the base its move there recorded, 0 in its home.
func (t *Topic) EpochBase(i int) model.Epoch { return t.piece(i).EpochBase }

// pieceStart is where queue i's records in its current group begin (0 in
// its home).
func (t *Topic) pieceStart(i int) model.QueueOffset { return t.piece(i).From }

// piece is queue i's piece in the group it takes appends in: its last
// settled one, else its home's.
func (t *Topic) piece(i int) route.Piece {
	ps := t.Moves.Of(i)
	for j := len(ps) - 1; j >= 0; j-- {
		if ps[j].From != route.PieceMoving {
			return ps[j]
		}
	}
	return route.Piece{Group: t.HomeOf(i)}
}
