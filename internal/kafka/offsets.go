package kafka

import (
	"context"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// A consumer group's offsets are kept by its coordinator's broker by queue
// id, for every partition of a topic whichever replication group holds it;
// these map them to and from Kafka partitions (t from the catalog, whose
// All lists every queue).

// commitOffsets records a group's offsets for partitions of t.
func commitOffsets(ctx context.Context, be *backend, group string, t *broker.Topic, offsets map[int32]broker.OffsetCommit) error {
	commits := make([]broker.OffsetCommit, 0, len(offsets))
	for p, c := range offsets {
		if p < 0 || int(p) >= len(t.All) {
			return model.ErrUnknownQueue
		}
		c.Queue = t.All[p]
		commits = append(commits, c)
	}
	return be.broker.CommitQueueOffsets(ctx, group, commits)
}

// committedOf returns a group's committed offsets of t by partition.
func committedOf(be *backend, group string, t *broker.Topic) map[int32]broker.Committed {
	all := be.broker.GroupQueueOffsets(group)
	out := map[int32]broker.Committed{}
	for p, q := range t.All {
		if c, ok := all[q]; ok {
			out[int32(p)] = c
		}
	}
	return out
}

// allCommitted returns every committed offset of a group, by topic and
// partition.
func (s *Server) allCommitted(be *backend, group string) map[*broker.Topic]map[int32]broker.Committed {
	all := be.broker.GroupQueueOffsets(group)
	out := map[*broker.Topic]map[int32]broker.Committed{}
	if len(all) == 0 {
		return out
	}
	for _, t := range s.cat().Topics(true) {
		for p, q := range t.All {
			if c, ok := all[q]; ok {
				if out[t] == nil {
					out[t] = map[int32]broker.Committed{}
				}
				out[t][int32(p)] = c
			}
		}
	}
	return out
}

// deleteOffsets forgets a group's offsets of some partitions of t.
func deleteOffsets(ctx context.Context, be *backend, group string, t *broker.Topic, parts []int32) error {
	queues := make([]model.QueueID, 0, len(parts))
	for _, p := range parts {
		if p < 0 || int(p) >= len(t.All) {
			return model.ErrUnknownQueue
		}
		queues = append(queues, t.All[p])
	}
	return be.broker.DeleteQueueOffsets(ctx, group, queues)
}

// offsetGroups lists the groups this node coordinates that have committed
// offsets.
func (s *Server) offsetGroups() []string {
	var out []string
	for _, be := range s.attached() {
		for _, g := range be.broker.OffsetGroups() {
			if s.coordinatorGroup(g) == be.group {
				out = append(out, g)
			}
		}
	}
	return out
}
