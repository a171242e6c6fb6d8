package grpcv5

// RecallMessage cancels a delayed message not delivered yet, by the recall
// handle its send answered (the same form remoting's RECALL_MESSAGE takes).

import (
	"context"
	"errors"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rosettamq/rosetta/internal/broker"
)

// RecallMessage recalls a pending timer message.
func (s *Server) RecallMessage(ctx context.Context, req *v2.RecallMessageRequest) (*v2.RecallMessageResponse, error) {
	topic, due, id, err := broker.ParseRecallHandle(req.GetRecallHandle())
	if err != nil {
		return &v2.RecallMessageResponse{Status: &v2.Status{Code: v2.Code_BAD_REQUEST, Message: err.Error()}}, nil
	}
	if topic != req.GetTopic().GetName() {
		return &v2.RecallMessageResponse{Status: &v2.Status{Code: v2.Code_BAD_REQUEST, Message: "recall handle is for topic " + topic}}, nil
	}
	name, err := topicName(req.GetTopic())
	if err == nil {
		err = s.broker.RecallTimer(ctx, name, id, due)
	}
	if errors.Is(err, broker.ErrTimerNotPending) {
		return &v2.RecallMessageResponse{Status: &v2.Status{Code: v2.Code_NOT_FOUND, Message: err.Error()}}, nil
	}
	return &v2.RecallMessageResponse{Status: status(err), MessageId: id}, nil
}
