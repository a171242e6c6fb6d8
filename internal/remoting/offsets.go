package remoting

// Consumer offsets and queue bounds: QUERY_CONSUMER_OFFSET (14),
// UPDATE_CONSUMER_OFFSET (15, one-way), GET_MAX_OFFSET (30), GET_MIN_OFFSET
// (31), SEARCH_OFFSET_BY_TIMESTAMP (29). Offsets are the broker's, shared
// with Kafka consumer groups of the same name. A group with no committed
// offset for a queue that still starts at 0 gets 0, as RocketMQ answers (so
// CONSUME_FROM_LAST_OFFSET consumers of a new topic read it from the start);
// otherwise QUERY_NOT_FOUND lets the client apply its consumeFromWhere.

import (
	"strconv"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// queueOf resolves a request's topic and queueId.
func (s *Server) queueOf(req *protocol.Command) (*topicRef, int32, *protocol.Command) {
	t, err := s.lookupTopic(req.Ext("topic"))
	if err != nil {
		return nil, 0, errorResponse(req, err)
	}
	q := atoi32(req.Ext("queueId"))
	if q < 0 || int(q) >= t.QueueCount() {
		return nil, 0, protocol.NewResponse(req, protocol.InvalidParameter, "queueId "+req.Ext("queueId")+" out of range")
	}
	return t, q, nil
}

func handleQueryConsumerOffset(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, q, bad := s.queueOf(req)
	if bad != nil {
		return bad
	}
	got, err := s.broker.FetchOffsets(req.Ext("consumerGroup"), t.Name)
	if err != nil {
		return errorResponse(req, err)
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	if c, ok := got[q]; ok {
		resp.SetExt("offset", strconv.FormatInt(int64(c.Offset), 10))
		return resp
	}
	if start, _, _, err := s.broker.Offsets(t.Name, q); err == nil && start == 0 {
		resp.SetExt("offset", "0")
		return resp
	}
	return protocol.NewResponse(req, protocol.QueryNotFound, "no committed offset")
}

func handleUpdateConsumerOffset(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, q, bad := s.queueOf(req)
	if bad != nil {
		return bad
	}
	off, err := strconv.ParseInt(req.Ext("commitOffset"), 10, 64)
	if err != nil || off < 0 {
		return protocol.NewResponse(req, protocol.InvalidParameter, "commitOffset "+req.Ext("commitOffset"))
	}
	commit := s.broker.CommitOffsets
	if req.IsOneway() {
		commit = s.broker.CommitOffsetsNoWait // nobody waits for the answer
	}
	err = commit(rc.ctx, req.Ext("consumerGroup"), t.Name, map[int32]broker.OffsetCommit{q: {Offset: model.QueueOffset(off), LeaderEpoch: -1}})
	if err != nil {
		return errorResponse(req, err)
	}
	return protocol.NewResponse(req, protocol.Success, "")
}

// offsetAnswer answers with ext offset.
func offsetAnswer(req *protocol.Command, off int64) *protocol.Command {
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("offset", strconv.FormatInt(off, 10))
	return resp
}

func handleGetMaxOffset(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, q, bad := s.queueOf(req)
	if bad != nil {
		return bad
	}
	_, hw, _, err := s.broker.Offsets(t.Name, q)
	if err != nil {
		return errorResponse(req, err)
	}
	return offsetAnswer(req, int64(hw))
}

func handleGetMinOffset(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, q, bad := s.queueOf(req)
	if bad != nil {
		return bad
	}
	start, _, _, err := s.broker.Offsets(t.Name, q)
	if err != nil {
		return errorResponse(req, err)
	}
	return offsetAnswer(req, int64(start))
}

func handleSearchOffsetByTimestamp(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	t, q, bad := s.queueOf(req)
	if bad != nil {
		return bad
	}
	ts, err := strconv.ParseInt(req.Ext("timestamp"), 10, 64)
	if err != nil {
		return protocol.NewResponse(req, protocol.InvalidParameter, "timestamp "+req.Ext("timestamp"))
	}
	off, _, err := s.broker.OffsetForTime(t.Name, q, ts)
	if err != nil {
		return errorResponse(req, err)
	}
	return offsetAnswer(req, int64(off))
}
