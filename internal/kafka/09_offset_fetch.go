package kafka

// OffsetFetch (key 9), versions 0-9.
//
// Version notes: a group with no commits returns offset -1 for every asked
// partition and no error. Null topics (v2+) return every committed offset of
// the group. v8 batches several groups. v9 names the member of a
// consumer-protocol group: an unknown member is UNKNOWN_MEMBER_ID, an epoch
// newer than the member's STALE_MEMBER_EPOCH (group-level error). Leader
// epochs are -1.
// require_stable (v7+, KIP-447): a partition with offsets pending in an open
// transaction answers UNSTABLE_OFFSET_COMMIT (the client retries) instead
// of its committed offset.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

var errUnstableOffsetCommit = &kafkaCodeError{code: kerr.UnstableOffsetCommit.Code, msg: "offsets pending in an open transaction"}

type fetchedPartition struct {
	partition int32
	offset    int64
	metadata  *string
	epoch     model.Epoch // committed leader epoch, -1 when unknown
	err       error
}

// fetchGroupOffsets answers one group's topics (nil: all committed).
func (s *Server) fetchGroupOffsets(be *backend, h home, group string, topics map[string][]int32, all, requireStable bool) map[string][]fetchedPartition {
	out := map[string][]fetchedPartition{}
	unstable := func(t *broker.Topic, p int32) bool {
		return requireStable && p >= 0 && int(p) < len(t.All) && s.pendingTxnOffsets(group, t.All[p])
	}
	if all {
		for t, parts := range s.allCommitted(be, group) {
			name := kafkaName(h, t)
			for p, c := range parts {
				md := c.Metadata
				fp := fetchedPartition{partition: p, offset: int64(c.Offset), metadata: &md, epoch: c.LeaderEpoch}
				if unstable(t, p) {
					fp = fetchedPartition{partition: p, offset: -1, epoch: -1, err: errUnstableOffsetCommit}
				}
				out[name] = append(out[name], fp)
			}
		}
		return out
	}
	for topic, parts := range topics {
		name, err := s.topicName(h, topic)
		var committed map[int32]broker.Committed
		var t *broker.Topic
		if err == nil {
			if t, err = s.cat().Topic(name); err == nil {
				committed = committedOf(be, group, t)
			}
		}
		for _, p := range parts {
			fp := fetchedPartition{partition: p, offset: -1, epoch: -1}
			if err != nil && !isUnknownTopic(err) {
				fp.err = err
			} else if t != nil && unstable(t, p) {
				fp.err = errUnstableOffsetCommit
			} else if c, ok := committed[p]; ok {
				md := c.Metadata
				fp.offset, fp.metadata, fp.epoch = int64(c.Offset), &md, c.LeaderEpoch
			}
			out[topic] = append(out[topic], fp)
		}
	}
	return out
}

func handleOffsetFetch(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	s := rc.srv()
	if req.Version >= 8 {
		for _, g := range req.Groups {
			topics := map[string][]int32{}
			for _, t := range g.Topics {
				topics[t.Topic] = t.Partitions
			}
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			if !rc.allowedGroup(g.Group, security.OpDescribe) {
				rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
				resp.Groups = append(resp.Groups, rg)
				continue
			}
			be, err := s.coordinator(g.Group)
			if err == nil {
				err = be.groups.CheckOffsetFetch(g.Group, deref(g.MemberID), g.MemberEpoch)
			}
			if err != nil {
				rg.ErrorCode = errorCode(err)
				resp.Groups = append(resp.Groups, rg)
				continue
			}
			for topic, parts := range rc.authorizedOffsets(s.fetchGroupOffsets(be, rc.conn.home, g.Group, topics, g.Topics == nil, req.RequireStable), g.Topics == nil) {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = topic
				for _, p := range parts {
					op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					op.Partition, op.Offset, op.LeaderEpoch, op.Metadata = p.partition, p.offset, int32(p.epoch), p.metadata
					op.ErrorCode = errorCode(p.err)
					rt.Partitions = append(rt.Partitions, op)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return reply{resp: resp}
	}
	if !rc.allowedGroup(req.Group, security.OpDescribe) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return reply{resp: resp}
	}
	topics := map[string][]int32{}
	for _, t := range req.Topics {
		topics[t.Topic] = t.Partitions
	}
	be, err := s.coordinator(req.Group)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return reply{resp: resp}
	}
	all := req.Topics == nil && req.Version >= 2
	for topic, parts := range rc.authorizedOffsets(s.fetchGroupOffsets(be, rc.conn.home, req.Group, topics, all, req.RequireStable), all) {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = topic
		for _, p := range parts {
			op := kmsg.NewOffsetFetchResponseTopicPartition()
			op.Partition, op.Offset, op.LeaderEpoch, op.Metadata = p.partition, p.offset, int32(p.epoch), p.metadata
			op.ErrorCode = errorCode(p.err)
			rt.Partitions = append(rt.Partitions, op)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return reply{resp: resp}
}

// authorizedOffsets hides the committed offsets of topics the principal may
// not describe: left out of an all-topics answer, TOPIC_AUTHORIZATION_FAILED
// for topics asked by name.
func (rc *reqCtx) authorizedOffsets(in map[string][]fetchedPartition, all bool) map[string][]fetchedPartition {
	if !rc.authzOn() {
		return in
	}
	for topic, parts := range in {
		if rc.allowedTopic(topic, security.OpDescribe) {
			continue
		}
		if all {
			delete(in, topic)
			continue
		}
		for i := range parts {
			parts[i] = fetchedPartition{partition: parts[i].partition, offset: -1, err: errTopicAuthorization}
		}
	}
	return in
}
