package serving

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/model"
)

// Moving a queue to another replication group (broker.BeginMove and the
// steps after it). Group 0's leader drives every move, so moves never race
// one another: it records the move, asks the leader of the queue's group to
// seal it, the leader of the new group to carry it on from its end, and
// records where it went; a move that cannot finish is given up (the queue
// unsealed where it was). Each step may be repeated.

// moveStep is the body and answer of the steps' calls.
type moveStep struct {
	Topic string            `json:"t"`
	Queue int               `json:"q"`
	Group int               `json:"g"` // the group whose leader takes the step
	End   model.QueueOffset `json:"o,omitempty"`
	Epoch model.Epoch       `json:"e,omitempty"` // sealed: the epoch it ended in; taken: the base
	// Producers are the idempotent producers' states in the sealed queue,
	// carried to its new group.
	Producers []producers.Exported `json:"p,omitempty"`
}

// moveTimeout bounds one move's steps.
const moveTimeout = 30 * time.Second

// MoveQueue moves a topic's queue to another group (the admin API's
// queue move): asked of group 0's leader, here or over the transport.
func (n *Node) MoveQueue(ctx context.Context, mv apiv1.QueueMove) (apiv1.QueueMove, error) {
	return peer.CallGroupWithin[apiv1.QueueMove, apiv1.QueueMove](ctx, n.Member.Peers(), 0, peer.MoveQueue, mv, moveTimeout+5*time.Second)
}

// answerMoves registers this member's answers to the move calls.
func (n *Node) answerMoves(p *peer.Peers) {
	peer.Handle(p, peer.MoveQueue, func(ctx context.Context, _ model.NodeID, mv apiv1.QueueMove) (apiv1.QueueMove, error) {
		return n.driveMove(ctx, mv)
	})
	peer.Handle(p, peer.MoveSeal, func(ctx context.Context, _ model.NodeID, s moveStep) (moveStep, error) {
		b, name, err := n.moveBroker(s)
		if err != nil {
			return s, err
		}
		if s.End, s.Epoch, err = b.SealMoving(ctx, name, s.Queue); err != nil {
			return s, err
		}
		if st := n.Stack(s.Group); st != nil && st.Parts.Producers != nil {
			if t, err := b.Topic(name); err == nil {
				s.Producers = st.Parts.Producers.Export(t.All[s.Queue])
			}
		}
		return s, nil
	})
	peer.Handle(p, peer.MoveTake, func(ctx context.Context, _ model.NodeID, s moveStep) (moveStep, error) {
		b, name, err := n.moveBroker(s)
		if err != nil {
			return s, err
		}
		if s.Epoch, err = b.TakeMoving(ctx, name, s.Queue, s.End, s.Epoch); err != nil {
			return s, err
		}
		if st := n.Stack(s.Group); st != nil && st.Parts.Producers != nil {
			if t, err := b.Topic(name); err == nil {
				st.Parts.Producers.Import(t.All[s.Queue], s.Producers)
			}
		}
		s.Producers = nil
		return s, nil
	})
	peer.Handle(p, peer.MoveUnseal, func(ctx context.Context, _ model.NodeID, s moveStep) (moveStep, error) {
		b, name, err := n.moveBroker(s)
		if err != nil {
			return s, err
		}
		return s, b.UnsealMoving(ctx, name, s.Queue)
	})
}

// moveBroker is the broker of the group a step names, led here.
func (n *Node) moveBroker(s moveStep) (*broker.Broker, model.TopicName, error) {
	name, err := model.ParseTopicName(s.Topic)
	if err != nil {
		return nil, name, err
	}
	b, err := n.groupBroker(s.Group)
	return b, name, err
}

// driveMove runs a move at group 0's leader.
func (n *Node) driveMove(ctx context.Context, mv apiv1.QueueMove) (apiv1.QueueMove, error) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	n.movesMu.Lock()
	defer n.movesMu.Unlock()
	st := n.Stack(0)
	if st == nil {
		return mv, fmt.Errorf("%w: group 0 is not led here", model.ErrNotLeader)
	}
	cat := st.Broker
	name, err := model.ParseTopicName(mv.Topic)
	if err != nil {
		return mv, err
	}
	t, err := cat.Topic(name)
	if err != nil {
		return mv, err
	}
	if mv.Queue < 0 || mv.Queue >= len(t.All) {
		return mv, fmt.Errorf("%w: %s has %d queues", model.ErrUnknownQueue, name, len(t.All))
	}
	from := int(t.GroupOf(mv.Queue))
	mv.Topic, mv.FromGroup = name.String(), from
	if _, err := cat.BeginMove(ctx, name, mv.Queue, model.GroupID(mv.ToGroup), func(to model.GroupID) error {
		return n.canTake(t, mv.Queue, from, int(to))
	}); err != nil {
		return mv, err
	}
	end, err := n.finishMove(ctx, cat, name, mv.Queue, from, mv.ToGroup)
	if err != nil {
		return mv, err
	}
	mv.FromOffset, mv.Millis = int64(end), time.Since(began).Milliseconds()
	n.log.Info("queue moved", "topic", mv.Topic, "queue", mv.Queue, "from_group", from, "to_group", mv.ToGroup,
		"from_offset", end, "took", time.Since(began))
	return mv, nil
}

// finishMove takes a begun move of queue i from group from to group to
// through its steps, or gives it up (the queue goes on where it was).
func (n *Node) finishMove(ctx context.Context, cat *broker.Broker, name model.TopicName, i, from, to int) (model.QueueOffset, error) {
	step := moveStep{Topic: name.String(), Queue: i, Group: from}
	sealed, err := n.sealForMove(ctx, step)
	if err == nil {
		step = moveStep{Topic: step.Topic, Queue: i, Group: to, End: sealed.End, Epoch: sealed.Epoch, Producers: sealed.Producers}
		var taken moveStep
		if taken, err = peer.CallGroup[moveStep, moveStep](ctx, n.Member.Peers(), to, peer.MoveTake, step); err == nil {
			if _, err = cat.SettleMove(ctx, name, i, sealed.End, taken.Epoch); err == nil {
				n.log.Debug("queue move steps", "topic", name.String(), "queue", i, "ended_in_epoch", sealed.Epoch, "epoch_base", taken.Epoch)
				return sealed.End, nil
			}
		}
	}
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer acancel()
	_, uerr := peer.CallGroup[moveStep, moveStep](actx, n.Member.Peers(), from, peer.MoveUnseal, moveStep{Topic: name.String(), Queue: i, Group: from})
	if uerr == nil {
		_, uerr = cat.SettleMove(actx, name, i, route.PieceMoving, 0)
	}
	if uerr != nil {
		n.log.Warn("giving up a queue move", "topic", name.String(), "queue", i, "err", uerr)
	}
	return 0, fmt.Errorf("queue move given up: %w", err)
}

// resumeMoves, while this member leads group 0, finishes the moves a
// previous leader began and did not finish (it died, or lost group 0).
func (n *Node) resumeMoves(ctx context.Context, cat *broker.Broker) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, t := range cat.Topics(false) {
			for _, mv := range t.Moves {
				if !t.Moves.Moving(mv.Queue) {
					continue
				}
				n.movesMu.Lock()
				if cur, err := cat.Topic(t.Name); err == nil && cur.Moves.Moving(mv.Queue) {
					to := int(mv.Pieces[len(mv.Pieces)-1].Group)
					from := int(cur.GroupOf(mv.Queue))
					mctx, cancel := context.WithTimeout(ctx, moveTimeout)
					end, err := n.finishMove(mctx, cat, t.Name, mv.Queue, from, to)
					cancel()
					n.log.Info("resumed an unfinished queue move", "topic", t.Name.String(), "queue", mv.Queue, "from_group", from,
						"to_group", to, "from_offset", end, "err", err)
				}
				n.movesMu.Unlock()
			}
		}
	}
}

// sealForMove seals the queue a step names at its group's leader, trying
// again while a Kafka transaction is open in it (producers are refused
// while it is sealed, so a retry finds it between transactions) — for at
// most sealPatience.
func (n *Node) sealForMove(ctx context.Context, step moveStep) (moveStep, error) {
	deadline := time.Now().Add(sealPatience)
	for {
		sealed, err := peer.CallGroup[moveStep, moveStep](ctx, n.Member.Peers(), step.Group, peer.MoveSeal, step)
		if !errors.Is(err, broker.ErrMoveBusy) || time.Now().After(deadline) {
			return sealed, err
		}
		select {
		case <-ctx.Done():
			return sealed, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sealPatience bounds how long a move waits for a queue free of open
// transactions.
const sealPatience = 10 * time.Second

// canTake refuses a group that cannot take queue i of t: none such, no
// leader, or one keeping another number of copies than the queue's group.
func (n *Node) canTake(t *broker.Topic, i, from, to int) error {
	groups := n.Member.Groups()
	if to < 0 || to >= len(groups) {
		return fmt.Errorf("%w: the cluster has no group %d (groups 0..%d)", broker.ErrMoveRefused, to, len(groups)-1)
	}
	if leader, _ := groups[to].Leader(); leader == 0 {
		return fmt.Errorf("%w: group %d has no leader now", broker.ErrMoveRefused, to)
	}
	want := t.Config.ReplicationFactor
	if want == 0 {
		want = n.Member.FactorOf(model.GroupID(from))
	}
	if got := n.Member.FactorOf(model.GroupID(to)); got != want {
		return fmt.Errorf("%w: group %d keeps %d copies, queue %d of %s keeps %d", broker.ErrMoveRefused, to, got, i, t.Name, want)
	}
	return nil
}
