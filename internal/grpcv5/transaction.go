package grpcv5

// Transactions over gRPC: a TRANSACTION message is a half message of the
// producer group "%GRPC%<topic>" (gRPC producers have no group: the
// topic's publishers stand for it); the send answers its transaction id
// (the half offset, opaque to clients), which EndTransaction names. The
// broker's check-back reaches a client that declared the topic in its
// publishing settings as a RecoverOrphanedTransactionCommand on its
// telemetry stream; the client answers with EndTransaction
// (source SERVER_CHECK).

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

const txnGroupPrefix = "%GRPC%"

// txnGroup is the producer group of a topic's gRPC transactions.
func txnGroup(topic *v2.Resource) string {
	name := topic.GetName()
	if ns := topic.GetResourceNamespace(); ns != "" {
		name = ns + "%" + name
	}
	return txnGroupPrefix + name
}

// transactionID names a half message to gRPC clients.
func transactionID(off model.QueueOffset) string { return "T" + strconv.FormatInt(int64(off), 10) }

var errBadTransactionID = errors.New("transaction id is not valid")

func parseTransactionID(id string) (model.QueueOffset, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(id, "T"), 10, 64)
	if err != nil || !strings.HasPrefix(id, "T") || n < 0 {
		return 0, errBadTransactionID
	}
	return model.QueueOffset(n), nil
}

// EndTransaction commits or rolls back a half message.
func (s *Server) EndTransaction(ctx context.Context, req *v2.EndTransactionRequest) (*v2.EndTransactionResponse, error) {
	off, err := parseTransactionID(req.GetTransactionId())
	if err != nil {
		return &v2.EndTransactionResponse{Status: &v2.Status{Code: v2.Code_INVALID_TRANSACTION_ID, Message: err.Error()}}, nil
	}
	var commit bool
	switch req.GetResolution() {
	case v2.TransactionResolution_COMMIT:
		commit = true
	case v2.TransactionResolution_ROLLBACK:
	default:
		return &v2.EndTransactionResponse{Status: &v2.Status{Code: v2.Code_BAD_REQUEST, Message: "resolution must be COMMIT or ROLLBACK"}}, nil
	}
	// Applied even if the client goes away right after asking.
	_, _, _, err = s.broker.EndTransaction(broker.WithTraceSource(context.WithoutCancel(ctx), "grpc", clientID(ctx)), txnGroup(req.GetTopic()), off, commit)
	if err != nil {
		s.log.Info("end transaction refused", "topic", req.GetTopic().GetName(), "transaction", req.GetTransactionId(),
			"source", req.GetSource().String(), "err", err)
	}
	return &v2.EndTransactionResponse{Status: status(err)}, nil
}

// recoverOrphan asks a publisher of the half message's topic to resolve it.
func (s *Server) recoverOrphan(c broker.TxnCheck) bool {
	if !strings.HasPrefix(c.Group, txnGroupPrefix) {
		return false
	}
	rmqTopic := strings.TrimPrefix(c.Group, txnGroupPrefix)
	topic := &v2.Resource{Name: rmqTopic}
	if ns, name, ok := strings.Cut(rmqTopic, "%"); ok {
		topic = &v2.Resource{ResourceNamespace: ns, Name: name}
	}
	var candidates []*client
	for _, cl := range s.clients.all() {
		if cl.publishes(topic.GetName()) {
			candidates = append(candidates, cl)
		}
	}
	if len(candidates) == 0 {
		return false
	}
	m := c.Message
	realQueue, _ := m.Header(broker.HeaderRealQueue)
	q, _ := strconv.Atoi(string(realQueue))
	msg := toProto(&m, topic, storedMeta{queueID: int32(q), offset: c.Offset, storeTime: c.StoreTime})
	to := candidates[rand.IntN(len(candidates))]
	err := to.send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_RecoverOrphanedTransactionCommand{
		RecoverOrphanedTransactionCommand: &v2.RecoverOrphanedTransactionCommand{Message: msg, TransactionId: transactionID(c.Offset)}}})
	return err == nil
}
