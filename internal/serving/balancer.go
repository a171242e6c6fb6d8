package serving

import (
	"context"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// The queue balancer (cluster.balance_queues, off by default): group 0's
// leader evens out how many queues the groups hold — each group's leader
// takes the appends and serves the reads of the queues in it — by moving
// one queue at a time from the group holding the most to the group of the
// same replication factor holding the fewest, when they differ by two or
// more. Groups added to a running cluster fill up this way. Internal
// topics, retry and dead-letter queues (every group keeps its own) are
// neither counted nor moved.

// balanceQueues runs the balancer every interval while ctx lasts.
func (n *Node) balanceQueues(ctx context.Context, cat *broker.Broker, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if mv, ok := n.pickMove(cat); ok {
			mctx, cancel := context.WithTimeout(ctx, moveTimeout)
			done, err := n.driveMove(mctx, mv)
			cancel()
			if err != nil {
				n.log.Warn("queue balancer: a move failed", "topic", mv.Topic, "queue", mv.Queue, "to_group", mv.ToGroup, "err", err)
				continue
			}
			n.log.Info("queue balancer moved a queue", "topic", done.Topic, "queue", done.Queue, "from_group", done.FromGroup,
				"to_group", done.ToGroup, "from_offset", done.FromOffset)
		}
	}
}

// pickMove chooses the balancer's next move: a queue of the group holding
// the most queues to the group of its factor holding the fewest, when
// they differ by two or more (false: balanced).
func (n *Node) pickMove(cat *broker.Broker) (apiv1.QueueMove, bool) {
	groups := n.Member.Groups()
	counts := make([]int, len(groups))
	type candidate struct {
		t *broker.Topic
		i int
	}
	held := make([][]candidate, len(groups))
	for _, t := range cat.Topics(false) {
		if t.Internal || broker.GroupOwned(t.Name) {
			continue
		}
		for i := range t.All {
			g := int(t.GroupOf(i))
			if g >= len(groups) {
				continue
			}
			counts[g]++
			if !t.Moves.Moving(i) {
				held[g] = append(held[g], candidate{t, i})
			}
		}
	}
	best, bestGap := apiv1.QueueMove{}, 1
	for from := range groups {
		for to := range groups {
			gap := counts[from] - counts[to]
			if gap <= bestGap || n.Member.FactorOf(model.GroupID(from)) != n.Member.FactorOf(model.GroupID(to)) {
				continue
			}
			if leader, _ := groups[to].Leader(); leader == 0 {
				continue
			}
			// The newest queue of from that was never in to.
			for j := len(held[from]) - 1; j >= 0; j-- {
				c := held[from][j]
				if !everIn(c.t, c.i, model.GroupID(to)) {
					best, bestGap = apiv1.QueueMove{Topic: c.t.Name.String(), Queue: c.i, FromGroup: from, ToGroup: to}, gap
					break
				}
			}
		}
	}
	return best, bestGap > 1
}

// everIn reports whether queue i of t has had a piece in group g.
func everIn(t *broker.Topic, i int, g model.GroupID) bool {
	for _, p := range t.Moves.Chain(t.Groups, i) {
		if p.Group == g {
			return true
		}
	}
	return false
}
