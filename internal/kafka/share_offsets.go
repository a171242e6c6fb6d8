package kafka

// Share groups' start offsets (the share-partition start offset, SPSO: every
// record below is done for the group). The partition's leader knows it from
// the group's state in its POP engine; the group's coordinator keeps it as
// the group's committed offset (POP commits it, and the admin calls below
// set it), which is what answers where the state is not here.

import (
	"context"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// shareStart is a share group's start offset in partition p of t and how
// many records above it are done (-1, 0 when the group has none there).
func (s *Server) shareStart(be *backend, group string, t *broker.Topic, p int32) (model.QueueOffset, int) {
	if pp, err := s.partition(t, p); err == nil && pp.be.pop != nil {
		if start, done, ok := pp.be.pop.Place(group, pp.queue); ok {
			return start, done
		}
	}
	if c, ok := committedOf(be, group, t)[p]; ok {
		return c.Offset, 0
	}
	return -1, 0
}

// shareTopics lists the topics a share group has a place in, with their
// partitions: committed offsets at its coordinator and states in the POP
// engines here.
func (s *Server) shareTopics(be *backend, group string) map[*broker.Topic][]int32 {
	out := map[*broker.Topic][]int32{}
	for t, parts := range s.allCommitted(be, group) {
		for p := range parts {
			out[t] = append(out[t], p)
		}
	}
	for _, b := range s.attached() {
		if b.pop == nil {
			continue
		}
		for _, q := range b.pop.GroupQueues(group) {
			ref, err := b.broker.QueueByID(q)
			if err != nil {
				continue
			}
			t, err := s.cat().Topic(ref.Topic.Name)
			if err != nil {
				continue
			}
			for p, id := range t.All {
				if id == q && !containsPartition(out[t], int32(p)) {
					out[t] = append(out[t], int32(p))
				}
			}
		}
	}
	return out
}

func containsPartition(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// setShareStart moves a share group's start offset in partition p of t:
// its state at the partition's leader (if here) starts again there, and
// its coordinator commits it. offset < 0 forgets the group's place (the
// next member starts where share.auto.offset.reset says).
func (s *Server) setShareStart(ctx context.Context, be *backend, group string, t *broker.Topic, p int32, offset model.QueueOffset) error {
	if pp, err := s.partition(t, p); err == nil && pp.be.pop != nil {
		if offset >= 0 {
			err = pp.be.pop.Reset(ctx, group, pp.queue, offset)
		} else {
			err = pp.be.pop.Forget(ctx, group, pp.queue)
		}
		if err != nil {
			return err
		}
	}
	if offset < 0 {
		return deleteOffsets(ctx, be, group, t, []int32{p})
	}
	return commitOffsets(ctx, be, group, t, map[int32]broker.OffsetCommit{p: {Offset: offset, LeaderEpoch: -1}})
}

// forgetShareStates drops a deleted share group's states in the POP
// engines here. On a cluster the states at other members' partitions stay:
// a share group made again under the same id carries on from them there.
func (s *Server) forgetShareStates(ctx context.Context, group string) error {
	for _, b := range s.attached() {
		if b.pop == nil {
			continue
		}
		for _, q := range b.pop.GroupQueues(group) {
			if err := b.pop.Forget(ctx, group, q); err != nil {
				return err
			}
		}
	}
	return nil
}
