package remoting

// RECALL_MESSAGE (370, RocketMQ 5.3.2+): cancels a timer or delayed message
// not delivered yet. A send of such a message answers a recall handle (ext
// recallHandle): base64url of "v1 <topic> <broker> <due ms> <message id>",
// the form RocketMQ's RecallMessageHandle uses. The request names the topic
// and the handle; the answer carries the message id, or an error when the
// message is not pending (delivered, recalled, or unknown).

import (
	"errors"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// recallHandle builds the handle a timer message's send answers.
func (s *Server) recallHandle(topic string, due int64, id string) string {
	return broker.RecallHandle(topic, s.opts.BrokerName, due, id)
}

func handleRecallMessage(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	topic, dueMs, id, err := broker.ParseRecallHandle(req.Ext("recallHandle"))
	if err != nil {
		return protocol.NewResponse(req, protocol.InvalidParameter, err.Error())
	}
	if t := req.Ext("topic"); t != "" && t != topic {
		return protocol.NewResponse(req, protocol.InvalidParameter, "recall handle is for topic "+topic+", not "+t)
	}
	name, err := topicName(topic)
	if err != nil {
		return errorResponse(req, err)
	}
	if err := s.broker.RecallTimer(rc.ctx, name, id, dueMs); err != nil {
		if errors.Is(err, broker.ErrTimerNotPending) {
			return protocol.NewResponse(req, protocol.SystemError, "recall failed: "+err.Error())
		}
		return errorResponse(req, err)
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("msgId", id)
	return resp
}
