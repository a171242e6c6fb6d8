package grpcv5

import (
	"errors"
	"fmt"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/model"
)

func okStatus() *v2.Status { return &v2.Status{Code: v2.Code_OK, Message: "OK"} }

// codeError carries a status code decided by a handler.
type codeError struct {
	code v2.Code
	msg  string
}

func (e *codeError) Error() string { return e.msg }

func statusErr(code v2.Code, format string, args ...any) error {
	return &codeError{code: code, msg: fmt.Sprintf(format, args...)}
}

// status is the one place core errors become apache.rocketmq.v2 codes.
func status(err error) *v2.Status {
	if err == nil {
		return okStatus()
	}
	var ce *codeError
	code := v2.Code_INTERNAL_ERROR
	switch {
	case errors.As(err, &ce):
		code = ce.code
	case errors.Is(err, model.ErrUnknownTopic):
		code = v2.Code_TOPIC_NOT_FOUND
	case errors.Is(err, model.ErrInvalidTopic):
		code = v2.Code_ILLEGAL_TOPIC
	case errors.Is(err, model.ErrUnknownQueue):
		code = v2.Code_NOT_FOUND
	case errors.Is(err, model.ErrMessageTooLarge):
		code = v2.Code_MESSAGE_BODY_TOO_LARGE
	case errors.Is(err, broker.ErrTimerIllegal):
		code = v2.Code_ILLEGAL_DELIVERY_TIME
	case errors.Is(err, broker.ErrTimerNotPending), errors.Is(err, broker.ErrHalfNotPending):
		code = v2.Code_NOT_FOUND
	case errors.Is(err, broker.ErrHalfGroupMismatch):
		code = v2.Code_INVALID_TRANSACTION_ID
	case errors.Is(err, model.ErrDiskFull), errors.Is(err, model.ErrClosed), errors.Is(err, model.ErrNotLeader),
		errors.Is(err, model.ErrTierUnavailable):
		code = v2.Code_HA_NOT_AVAILABLE
	case errors.Is(err, quota.ErrExceeded):
		code = v2.Code_FORBIDDEN
	}
	return &v2.Status{Code: code, Message: err.Error()}
}

// topicName maps a gRPC resource to a topic: its namespace is a namespace
// of the default tenant, as RocketMQ's namespaces are on remoting.
func topicName(r *v2.Resource) (model.TopicName, error) {
	if r.GetName() == "" {
		return model.TopicName{}, fmt.Errorf("%w: empty topic", model.ErrInvalidTopic)
	}
	ns := r.GetResourceNamespace()
	if ns == "" {
		ns = model.DefaultNamespace
	}
	n := model.TopicName{Tenant: model.DefaultTenant, Namespace: ns, Topic: r.GetName()}
	if _, err := model.ParseTopicName(n.String()); err != nil {
		return n, err
	}
	return n, nil
}

// groupName is a consumer group's name as remoting clients spell it
// ("ns%group" inside a namespace), so both protocols share its state.
func groupName(r *v2.Resource) string {
	if ns := r.GetResourceNamespace(); ns != "" {
		return ns + "%" + r.GetName()
	}
	return r.GetName()
}

// groupConfig is a group's configuration (RocketMQ's defaults when unset).
func (s *Server) groupConfig(r *v2.Resource) broker.GroupConfig {
	name := groupName(r)
	if c, ok := s.broker.GroupConfig(name); ok {
		return c
	}
	return broker.DefaultGroupConfig(name)
}
