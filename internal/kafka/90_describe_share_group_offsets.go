package kafka

// DescribeShareGroupOffsets (key 90), versions 0-1: share groups' start
// offsets per partition (share_offsets.go), all the group has a place in
// when no topics are named; v1 adds the lag (records from the start offset
// to the high watermark not yet done). A partition where the group has no
// place has StartOffset -1.
//
// Not implemented: on a cluster, the start offset of a partition led by
// another member is the one last committed (every 30 s), not the leader's
// current one.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDescribeShareGroupOffsets(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	s := rc.srv()
	for _, rg := range req.Groups {
		g := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		g.GroupID = rg.GroupID
		if !rc.allowedGroup(rg.GroupID, security.OpDescribe) {
			g.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, g)
			continue
		}
		be, err := s.coordinator(rg.GroupID)
		if err != nil {
			g.ErrorCode, g.ErrorMessage = errorCode(err), errorMessage(err)
			resp.Groups = append(resp.Groups, g)
			continue
		}
		type named struct {
			name  string
			t     *broker.Topic
			parts []int32
			err   error
		}
		var topics []named
		if rg.Topics == nil {
			for t, parts := range s.shareTopics(be, rg.GroupID) {
				name := kafkaName(rc.conn.home, t)
				if rc.allowedTopic(name, security.OpDescribe) {
					sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
					topics = append(topics, named{name: name, t: t, parts: parts})
				}
			}
			sort.Slice(topics, func(i, j int) bool { return topics[i].name < topics[j].name })
		}
		for _, rt := range rg.Topics {
			t, err := rc.lookupTopic(rt.Topic)
			if !rc.allowedTopic(rt.Topic, security.OpDescribe) {
				t, err = nil, errTopicAuthorization
			}
			topics = append(topics, named{name: rt.Topic, t: t, parts: rt.Partitions, err: err})
		}
		for _, nt := range topics {
			tr := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			tr.Topic = nt.name
			if nt.t != nil {
				tr.TopicID = topicID(nt.t)
			}
			for _, p := range nt.parts {
				pr := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				pr.Partition = p
				pr.LeaderEpoch = -1
				switch {
				case nt.err != nil:
					pr.ErrorCode, pr.ErrorMessage = errorCode(nt.err), errorMessage(nt.err)
					pr.StartOffset = -1
				case p < 0 || int(p) >= len(nt.t.All):
					pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
					pr.StartOffset = -1
				default:
					start, done := s.shareStart(be, rg.GroupID, nt.t, p)
					pr.StartOffset = int64(start)
					if start >= 0 {
						if pp, err := s.partition(nt.t, p); err == nil {
							if _, hw, _, err := pp.be.broker.Offsets(pp.topic.Name, pp.index); err == nil {
								pr.Lag = max(int64(hw)-int64(start)-int64(done), 0)
							}
						}
					}
				}
				tr.Partitions = append(tr.Partitions, pr)
			}
			g.Topics = append(g.Topics, tr)
		}
		if g.Topics == nil {
			g.Topics = []kmsg.DescribeShareGroupOffsetsResponseGroupTopic{}
		}
		resp.Groups = append(resp.Groups, g)
	}
	return reply{resp: resp}
}
