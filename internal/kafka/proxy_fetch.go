package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetch splits a fetch by its partitions' groups, each part a full fetch
// (no session) with the client's wait. It answers as soon as one part
// brings records (or an error) with what has come back by then — a part
// still parked is left to finish on its own and its answer dropped (a
// fetch changes nothing, and the client asks again from its offsets) — or,
// when none brings anything, once all are back.
func (c *proxyConn) fetch(ctx context.Context, pd *pending, req *kmsg.FetchRequest) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	var unknown []kmsg.FetchResponseTopic
	names := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		name := t.Topic
		if req.Version >= 13 {
			if name = c.p.cache.name(t.TopicID); name == "" {
				c.learnTopicIDs(ctx, pd)
				name = c.p.cache.name(t.TopicID)
			}
		}
		if name != "" {
			c.learnTopics(ctx, pd, []string{name})
		}
		names[i] = name
	}
	split := splitByGroup(req.Topics, fetchPartitions, func(i int, p *kmsg.FetchRequestTopicPartition) (int, bool) {
		return c.p.cache.groupOf(names[i], p.Partition)
	}, func(t *kmsg.FetchRequestTopic, p *kmsg.FetchRequestTopicPartition) {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition, rp.ErrorCode = p.Partition, kerr.UnknownTopicOrPartition.Code
		if req.Version >= 13 {
			rp.ErrorCode = kerr.UnknownTopicID.Code
		}
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		unknown = append(unknown, rt)
	})
	byGroup := make(map[int]*kmsg.FetchRequest, len(split))
	for g, topics := range split {
		cp := *req
		cp.Topics, cp.ForgottenTopics = topics, nil
		cp.SessionID, cp.SessionEpoch = 0, -1
		byGroup[g] = &cp
	}
	type part struct {
		g    int
		resp *kmsg.FetchResponse
	}
	parts := make(chan part, len(byGroup))
	subs := make(map[int]kmsg.Request, len(byGroup))
	for g, sub := range byGroup {
		subs[g] = sub
	}
	for g, pc := range c.prepareAll(ctx, pd, subs) {
		go func() {
			r, _, err := c.send(ctx, pc)
			fr, _ := r.(*kmsg.FetchResponse)
			if err != nil || fr == nil {
				fr = fetchFailed(byGroup[g])
			}
			parts <- part{g, fr}
		}()
	}
	for range byGroup {
		pt := <-parts
		resp.Topics = append(resp.Topics, pt.resp.Topics...)
		resp.ThrottleMillis = max(resp.ThrottleMillis, pt.resp.ThrottleMillis)
		if fetchBrought(pt.resp) {
			break
		}
	}
	resp.Topics = append(resp.Topics, unknown...)
	resp.ErrorCode, resp.SessionID, resp.Brokers = 0, 0, nil
	for i := range resp.Topics {
		name := resp.Topics[i].Topic
		if req.Version >= 13 {
			name = c.p.cache.name(resp.Topics[i].TopicID)
		}
		for j := range resp.Topics[i].Partitions {
			if p := &resp.Topics[i].Partitions[j]; p.CurrentLeader.LeaderID >= 0 {
				p.CurrentLeader.LeaderID = c.leaderOf(name, p.Partition)
			}
		}
	}
	c.answer(pd, resp, false)
}

// fetchBrought reports whether a fetch's answer holds records or an error.
func fetchBrought(r *kmsg.FetchResponse) bool {
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if len(p.RecordBatches) > 0 || p.ErrorCode != 0 {
				return true
			}
		}
	}
	return false
}

// fetchFailed is the answer of a fetch whose group's leader could not be
// reached: NOT_LEADER_OR_FOLLOWER for each partition.
func fetchFailed(req *kmsg.FetchRequest) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.NotLeaderForPartition.Code
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// listOffsets splits a ListOffsets by its partitions' groups.
func (c *proxyConn) listOffsets(ctx context.Context, pd *pending, req *kmsg.ListOffsetsRequest) {
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	c.learnTopics(ctx, pd, names)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	fail := func(topic string, p int32, code int16) {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsResponseTopicPartition()
		rp.Partition, rp.ErrorCode, rp.Offset, rp.Timestamp, rp.LeaderEpoch = p, code, -1, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
	}
	fanOutByPartition(ctx, c, pd, req.Topics, listOffsetsPartitions, func(t *kmsg.ListOffsetsRequestTopic) string { return t.Topic },
		func(p *kmsg.ListOffsetsRequestTopicPartition) int32 { return p.Partition },
		func(topics []kmsg.ListOffsetsRequestTopic) kmsg.Request {
			cp := *req
			cp.Topics = topics
			return &cp
		},
		func(a *kmsg.ListOffsetsResponse) { resp.Topics = append(resp.Topics, a.Topics...) }, fail)
	c.answer(pd, resp, false)
}

// offsetForLeaderEpoch splits an OffsetForLeaderEpoch by its partitions'
// groups.
func (c *proxyConn) offsetForLeaderEpoch(ctx context.Context, pd *pending, req *kmsg.OffsetForLeaderEpochRequest) {
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	c.learnTopics(ctx, pd, names)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	fail := func(topic string, p int32, code int16) {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
		rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = p, code, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
	}
	fanOutByPartition(ctx, c, pd, req.Topics, offsetForLeaderEpochPartitions, func(t *kmsg.OffsetForLeaderEpochRequestTopic) string { return t.Topic },
		func(p *kmsg.OffsetForLeaderEpochRequestTopicPartition) int32 { return p.Partition },
		func(topics []kmsg.OffsetForLeaderEpochRequestTopic) kmsg.Request {
			cp := *req
			cp.Topics = topics
			return &cp
		},
		func(a *kmsg.OffsetForLeaderEpochResponse) { resp.Topics = append(resp.Topics, a.Topics...) }, fail)
	c.answer(pd, resp, false)
}

// offsetFetch sends each consumer group's part to its coordinator (v8+
// name several groups).
func (c *proxyConn) offsetFetch(ctx context.Context, pd *pending, req *kmsg.OffsetFetchRequest) {
	if req.Version < 8 {
		c.whole(ctx, pd, c.coordinator(req.Group), req, nil)
		return
	}
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	fanOutByCoordinator(ctx, c, pd, req.Groups, func(g kmsg.OffsetFetchRequestGroup) string { return g.Group },
		func(groups []kmsg.OffsetFetchRequestGroup) kmsg.Request {
			cp := *req
			cp.Groups = groups
			return &cp
		},
		func(a *kmsg.OffsetFetchResponse) { resp.Groups = append(resp.Groups, a.Groups...) },
		func(g kmsg.OffsetFetchRequestGroup) {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, kerr.CoordinatorNotAvailable.Code
			resp.Groups = append(resp.Groups, rg)
		})
	c.answer(pd, resp, false)
}

// describeGroups sends each consumer group to its coordinator.
func (c *proxyConn) describeGroups(ctx context.Context, pd *pending, req *kmsg.DescribeGroupsRequest) {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	fanOutByCoordinator(ctx, c, pd, req.Groups, func(g string) string { return g },
		func(groups []string) kmsg.Request {
			cp := *req
			cp.Groups = groups
			return &cp
		},
		func(a *kmsg.DescribeGroupsResponse) { resp.Groups = append(resp.Groups, a.Groups...) },
		func(g string) {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, kerr.CoordinatorNotAvailable.Code
			resp.Groups = append(resp.Groups, rg)
		})
	c.answer(pd, resp, false)
}

// listGroups asks every coordinating group and merges their lists.
func (c *proxyConn) listGroups(ctx context.Context, pd *pending, req *kmsg.ListGroupsRequest) {
	byGroup := map[int]kmsg.Request{}
	for g := range max(c.p.opts.MadeGroups(), 1) {
		byGroup[g] = req
	}
	answers := fanOut[*kmsg.ListGroupsResponse](ctx, c, pd, byGroup)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	for g := range byGroup {
		a := answers[g]
		if a == nil {
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			continue
		}
		if a.ErrorCode != 0 {
			resp.ErrorCode = a.ErrorCode
		}
		resp.Groups = append(resp.Groups, a.Groups...)
	}
	c.answer(pd, resp, false)
}

// errorResponse is the response of a coordinator's request forwarded whole
// carrying coordinatorCode; nil for a request that has no such answer.
func errorResponse(req kmsg.Request, coordinatorCode int16) kmsg.Response {
	resp := req.ResponseKind()
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode, r.MemberID = coordinatorCode, req.(*kmsg.JoinGroupRequest).MemberID
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.ConsumerGroupHeartbeatResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.ShareGroupHeartbeatResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.AlterShareGroupOffsetsResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.DeleteShareGroupOffsetsResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.ShareFetchResponse:
		r.ErrorCode = kerr.NotLeaderForPartition.Code
	case *kmsg.ShareAcknowledgeResponse:
		r.ErrorCode = kerr.NotLeaderForPartition.Code
	case *kmsg.OffsetFetchResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.InitProducerIDResponse:
		r.ErrorCode, r.ProducerID, r.ProducerEpoch = coordinatorCode, -1, -1
	case *kmsg.AddOffsetsToTxnResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.EndTxnResponse:
		r.ErrorCode = coordinatorCode
	case *kmsg.OffsetCommitResponse:
		for _, t := range req.(*kmsg.OffsetCommitRequest).Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, coordinatorCode
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.TxnOffsetCommitResponse:
		for _, t := range req.(*kmsg.TxnOffsetCommitRequest).Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, coordinatorCode
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.AddPartitionsToTxnResponse:
		r.ErrorCode = coordinatorCode
		for _, t := range req.(*kmsg.AddPartitionsToTxnRequest).Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, coordinatorCode
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.CreateTopicsResponse:
		for _, t := range req.(*kmsg.CreateTopicsRequest).Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.ErrorCode = t.Topic, kerr.NotController.Code
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.CreatePartitionsResponse:
		for _, t := range req.(*kmsg.CreatePartitionsRequest).Topics {
			rt := kmsg.NewCreatePartitionsResponseTopic()
			rt.Topic, rt.ErrorCode = t.Topic, kerr.NotController.Code
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.DeleteTopicsResponse:
		dr := req.(*kmsg.DeleteTopicsRequest)
		names := dr.TopicNames
		for _, t := range dr.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
		for _, n := range names {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic, rt.ErrorCode = kmsg.StringPtr(n), kerr.NotController.Code
			r.Topics = append(r.Topics, rt)
		}
	default:
		return nil
	}
	return resp
}
