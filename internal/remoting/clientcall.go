package remoting

// Requests the broker relays to a live client, for admin tools such as
// RocketMQ Dashboard and mqadmin: GET_CONSUMER_RUNNING_INFO (307) and
// CONSUME_MESSAGE_DIRECTLY (309) go to the consumer named by its group and
// client id, over the connection it heartbeats on, and the consumer's
// answer comes back as the broker's; INVOKE_BROKER_TO_GET_CONSUMER_STATUS
// (223) asks every consumer of a group (GET_CONSUMER_STATUS_FROM_CLIENT,
// 221) for its offsets and gathers the answers, as RocketMQ's broker does.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// clientCallTimeout bounds how long a relayed request waits for the client.
const clientCallTimeout = 5 * time.Second

var errCallClosed = errors.New("the client's connection closed")

// call sends a request to the client at the other end of c and waits for
// its answer.
func (c *conn) call(ctx context.Context, cmd *protocol.Command) (*protocol.Command, error) {
	cmd.Opaque = c.s.opaque.Add(1)
	cmd.Flag &^= protocol.FlagOneway | protocol.FlagResponse
	ch := make(chan *protocol.Command, 1)
	c.callMu.Lock()
	if c.calls == nil {
		c.calls = map[int32]chan *protocol.Command{}
	}
	c.calls[cmd.Opaque] = ch
	c.callMu.Unlock()
	defer func() {
		c.callMu.Lock()
		delete(c.calls, cmd.Opaque)
		c.callMu.Unlock()
	}()
	select {
	case c.out <- cmd:
	case <-c.ctx.Done():
		return nil, errCallClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-c.ctx.Done():
		return nil, errCallClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// answered hands a client's answer to the call waiting for it (answers
// nobody waits for are dropped).
func (c *conn) answered(resp *protocol.Command) {
	c.callMu.Lock()
	ch := c.calls[resp.Opaque]
	c.callMu.Unlock()
	if ch != nil {
		select {
		case ch <- resp:
		default:
		}
	}
}

// consumerConn returns the connection a group's client heartbeats on.
func (s *Server) consumerConn(group, clientID string) *conn {
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	if cl, ok := s.clients.consumers[group][clientID]; ok {
		return cl.conn
	}
	return nil
}

// relayToConsumer forwards req to the consumer it names and returns the
// consumer's answer as this request's.
func relayToConsumer(rc *reqCtx, req *protocol.Command, fwd *protocol.Command) *protocol.Command {
	group, id := req.Ext("consumerGroup"), req.Ext("clientId")
	target := rc.conn.s.consumerConn(group, id)
	if target == nil {
		return protocol.NewResponse(req, protocol.SystemError, fmt.Sprintf("the consumer %s %s is not online", group, id))
	}
	ctx, cancel := context.WithTimeout(rc.ctx, clientCallTimeout)
	defer cancel()
	resp, err := target.call(ctx, fwd)
	if err != nil {
		return protocol.NewResponse(req, protocol.SystemError, fmt.Sprintf("asking the consumer %s %s: %v", group, id, err))
	}
	out := protocol.NewResponse(req, resp.Code, resp.Remark)
	out.Body = resp.Body
	for _, f := range resp.ExtFields {
		out.SetExt(f.Key, f.Value)
	}
	return out
}

func handleGetConsumerRunningInfo(rc *reqCtx, req *protocol.Command) *protocol.Command {
	fwd := &protocol.Command{Code: protocol.GetConsumerRunningInfo, Language: "JAVA", Version: req.Version,
		ExtFields: protocol.Pairs("consumerGroup", req.Ext("consumerGroup"), "clientId", req.Ext("clientId"),
			"jstackEnable", req.Ext("jstackEnable"))}
	return relayToConsumer(rc, req, fwd)
}

// handleConsumeMessageDirectly has a consumer consume one stored message
// now (RocketMQ Dashboard's "resend" of a message or a dead letter to one
// client): the message, found by its offset message id, travels in the
// request's body.
func handleConsumeMessageDirectly(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	pos, err := protocol.ParseOffsetMessageID(req.Ext("msgId"))
	if err != nil {
		return protocol.NewResponse(req, protocol.InvalidParameter, "msgId "+req.Ext("msgId")+": "+err.Error())
	}
	f, err := s.messageAt(pos)
	if err != nil {
		return protocol.NewResponse(req, protocol.SystemError, "no message "+req.Ext("msgId")+": "+err.Error())
	}
	if refused := rc.conn.check(rc.principal, req, topicCheck(rmqName(f.topic.Name), security.OpRead)); refused != nil {
		return refused
	}
	fwd := &protocol.Command{Code: protocol.ConsumeMessageDirectly, Language: "JAVA", Version: req.Version,
		ExtFields: protocol.Pairs("consumerGroup", req.Ext("consumerGroup"), "clientId", req.Ext("clientId"),
			"msgId", req.Ext("msgId"), "brokerName", s.opts.BrokerName)}
	fwd.Body = protocol.AppendStoredV1(nil, f.stored(rc.conn.store))
	return relayToConsumer(rc, req, fwd)
}

// handleGetConsumerStatus asks the group's consumers (or the one at
// clientAddr) for their offsets in topic and answers
// {"consumerTable": {clientId: {mq: offset}}}.
func handleGetConsumerStatus(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group, topic, only := req.Ext("group"), req.Ext("topic"), req.Ext("clientAddr")
	s.clients.mu.Lock()
	var targets []*client
	for _, cl := range s.clients.consumers[group] {
		if only == "" || cl.conn.remote == only {
			targets = append(targets, cl)
		}
	}
	s.clients.mu.Unlock()
	// Clients answer {"messageQueueTable": {<queue object>: offset, …}}:
	// RocketMQ's own JSON, whose map keys are objects, so not JSON that
	// encoding/json reads. The gathered answer keeps each table's text,
	// as RocketMQ's broker does: {"consumerTable": {"<client id>": <table>}}.
	var out []byte
	out = append(out, `{"consumerTable":{`...)
	answered := 0
	for _, cl := range targets {
		ctx, cancel := context.WithTimeout(rc.ctx, clientCallTimeout)
		resp, err := cl.conn.call(ctx, &protocol.Command{Code: protocol.GetConsumerStatusFromClient, Language: "JAVA", Version: req.Version,
			ExtFields: protocol.Pairs("topic", topic, "group", group, "clientAddr", cl.conn.remote)})
		cancel()
		if err != nil || resp.Code != protocol.Success {
			continue
		}
		table, ok := bytes.CutPrefix(bytes.TrimSpace(resp.Body), []byte(`{"messageQueueTable":`))
		if !ok || !bytes.HasSuffix(table, []byte("}")) {
			continue
		}
		if answered > 0 {
			out = append(out, ',')
		}
		id, _ := json.Marshal(cl.id)
		out = append(append(append(out, id...), ':'), table[:len(table)-1]...)
		answered++
	}
	if len(targets) == 0 {
		return protocol.NewResponse(req, protocol.SystemError, "no consumer of group "+group+" is online")
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body = append(out, "}}"...)
	resp.SetExt("clients", strconv.Itoa(answered))
	return resp
}
