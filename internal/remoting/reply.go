package remoting

// Request-reply. A requester's message carries CORRELATION_ID and
// REPLY_TO_CLIENT; the broker stamps it with CLUSTER so the responder can
// name the reply topic "<cluster>_REPLY_TOPIC". The responder sends its
// reply with SEND_REPLY_MESSAGE (324) or its V2 (325): the reply is stored
// in the reply topic like any message and pushed at once to the requesting
// client's connection with PUSH_REPLY_MESSAGE_TO_CLIENT (326); a requester
// that is not connected makes the send fail with SYSTEM_ERROR (the reply
// stays stored).

import (
	"strconv"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// Request-reply properties.
const (
	propCorrelationID = "CORRELATION_ID"
	propReplyTo       = "REPLY_TO_CLIENT"
	propCluster       = "CLUSTER"
)

// replyTopic is the topic replies are stored in.
func (s *Server) replyTopic() string { return s.opts.ClusterName + "_REPLY_TOPIC" }

// stampRequest marks a request message with this node's cluster name and
// remembers the connection it came on, where its reply is pushed.
func (s *Server) stampRequest(m *model.Message, from *conn) {
	to, ok := m.Header(propReplyTo)
	if !ok {
		return
	}
	if _, ok := m.Header(propCorrelationID); !ok {
		return
	}
	if _, ok := m.Header(propCluster); !ok {
		m.Headers = append(m.Headers, model.Header{Key: propCluster, Value: []byte(s.opts.ClusterName)})
	}
	if v, _ := m.Header("MSG_TYPE"); string(v) != "reply" {
		s.clients.addRequester(string(to), from)
	}
}

func handleSendReplyMessage(rc *reqCtx, req *protocol.Command) *protocol.Command {
	resp := handleSendMessage(rc, req)
	if resp.Code != protocol.Success {
		return resp
	}
	s := rc.conn.s
	h := sendHeaderOf(req)
	props := protocol.ParseProperties(h.get("properties"))
	var to string
	for _, p := range props {
		if p.Key == propReplyTo {
			to = p.Value
		}
	}
	target := s.clients.connOf(to)
	if target == nil {
		return protocol.NewResponse(req, protocol.SystemError, "push reply message failed: requester "+to+" is not connected")
	}
	ext := protocol.Pairs("bornHost", rc.conn.remote,
		"storeHost", rc.conn.store, "storeTimestamp", strconv.FormatInt(rc.conn.s.broker.Now().UnixMilli(), 10),
		"queueId", resp.Ext("queueId"))
	for _, k := range []string{"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "sysFlag",
		"bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode"} {
		if v := h.get(k); v != "" {
			ext = append(ext, protocol.Field{Key: k, Value: v})
		}
	}
	target.sendOneway(&protocol.Command{Code: protocol.PushReplyMessageToClient, Language: "GO", Version: protocol.Version,
		ExtFields: ext, Body: req.Body})
	return resp
}
