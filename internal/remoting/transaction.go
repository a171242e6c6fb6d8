package remoting

// Transactional messages: a send with TRAN_MSG=true is stored as a half
// message (see broker.AppendHalf) and answered with the half queue's offset
// message id and queue offset, which the client's END_TRANSACTION (37)
// names again (commitLogOffset, tranStateTableOffset). END_TRANSACTION is
// validated as RocketMQ's EndTransactionProcessor does: the half message
// must be pending, its PGROUP must be the request's producer group, and the
// two offsets must agree. The broker's check-back reaches producers as a
// one-way CHECK_TRANSACTION_STATE (39) carrying the stored half message,
// sent to one live connection of the group; the producer answers with a
// one-way END_TRANSACTION.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// END_TRANSACTION commitOrRollback values.
const (
	txnNotType  = 0
	txnCommit   = 8
	txnRollback = 12
)

func handleEndTransaction(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	group := req.Ext("producerGroup")
	kind := atoi32(req.Ext("commitOrRollback"))
	tableOffset, err1 := strconv.ParseInt(req.Ext("tranStateTableOffset"), 10, 64)
	pos, err2 := strconv.ParseInt(req.Ext("commitLogOffset"), 10, 64)
	log := s.log.With("group", group, "msgId", req.Ext("msgId"), "fromCheck", req.Ext("fromTransactionCheck"))
	if err1 != nil || err2 != nil {
		log.Warn("end transaction with malformed offsets", "tranStateTableOffset", req.Ext("tranStateTableOffset"),
			"commitLogOffset", req.Ext("commitLogOffset"))
		return protocol.NewResponse(req, protocol.SystemError, "malformed transaction offsets")
	}
	switch kind {
	case txnNotType:
		// The producer does not know yet: the broker checks back later.
		log.Info("transaction state unknown, left for check-back", "remark", req.Remark)
		return protocol.NewResponse(req, protocol.Success, "")
	case txnCommit, txnRollback:
	default:
		return protocol.NewResponse(req, protocol.SystemError, "unknown commitOrRollback "+strconv.Itoa(int(kind)))
	}
	if model.QueueID(pos>>40) != s.broker.HalfQueue() || pos&(1<<40-1) != tableOffset {
		log.Warn("end transaction names no half message", "tranStateTableOffset", tableOffset, "commitLogOffset", pos)
		return protocol.NewResponse(req, protocol.SystemError, "The commit log offset wrong")
	}
	// Applied even if the producer closes its connection right after this
	// one-way request.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rc.ctx), 10*time.Second)
	defer cancel()
	_, _, _, err := s.broker.EndTransaction(ctx, group, model.QueueOffset(tableOffset), kind == txnCommit)
	switch {
	case errors.Is(err, broker.ErrHalfNotPending):
		log.Info("end transaction for a message not pending (resolved already)", "offset", tableOffset)
		return protocol.NewResponse(req, protocol.SystemError, "Find prepared transaction message failed")
	case errors.Is(err, broker.ErrHalfGroupMismatch):
		log.Warn("end transaction from another producer group", "offset", tableOffset)
		return protocol.NewResponse(req, protocol.SystemError, "The producer group wrong")
	case err != nil:
		log.Error("end transaction failed", "offset", tableOffset, "err", err)
		return errorResponse(req, err)
	}
	return protocol.NewResponse(req, protocol.Success, "")
}

// checkTransaction sends a broker check to one live producer of the group.
func (s *Server) checkTransaction(c broker.TxnCheck) bool {
	conns := s.clients.producerConns(c.Group)
	if len(conns) == 0 {
		return false
	}
	to := conns[rand.IntN(len(conns))]
	m := &c.Message
	realTopic, _ := m.Header(broker.HeaderRealTopic)
	realQueue, _ := m.Header(broker.HeaderRealQueue)
	topic := string(realTopic)
	if n, err := model.ParseTopicName(topic); err == nil {
		topic = rmqName(n)
	}
	pos := position(c.Queue, c.Offset)
	uniq, _ := m.Header(propUniqKey)
	sm := storedMessage(m, topic, atoi32(string(realQueue)), c.Queue, c.Offset, c.StoreTime, to.store)
	sm.PhysicalOffset = pos
	to.sendOneway(&protocol.Command{Code: protocol.CheckTransactionState, Language: "GO", Version: protocol.Version,
		ExtFields: protocol.Pairs(
			"tranStateTableOffset", strconv.FormatInt(int64(c.Offset), 10),
			"commitLogOffset", strconv.FormatInt(pos, 10),
			"msgId", string(uniq),
			"transactionId", string(uniq),
			"offsetMsgId", to.ids.ID(pos)),
		Body: protocol.AppendStoredV1(nil, sm)})
	return true
}
