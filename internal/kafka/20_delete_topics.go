package kafka

// DeleteTopics (key 20), versions 0-6.
//
// Version notes: v6 may name topics by id; ids are matched against the
// stable ids Metadata reports.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDeleteTopics(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	s := rc.srv()
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if req.Version >= 6 {
		for _, t := range req.Topics {
			targets = append(targets, target{name: t.Topic, id: t.TopicID})
		}
	} else {
		for _, n := range req.TopicNames {
			n := n
			targets = append(targets, target{name: &n})
		}
	}
	for _, tg := range targets {
		r := kmsg.NewDeleteTopicsResponseTopic()
		r.Topic = tg.name
		r.TopicID = tg.id
		if tg.name == nil {
			if t, err := s.cat().TopicByID(tg.id); err == nil {
				r.Topic = strp(rc.kafkaName(t))
			}
			if r.Topic == nil {
				r.ErrorCode = kerr.UnknownTopicID.Code
				resp.Topics = append(resp.Topics, r)
				continue
			}
		}
		name, err := rc.changeableTopicName(*r.Topic)
		if !rc.allowedTopic(*r.Topic, security.OpDelete) {
			err = errTopicAuthorization
		}
		if err == nil {
			err = s.cat().DeleteTopic(rc.ctx(), name)
		}
		r.ErrorCode = controllerErrorCode(err)
		resp.Topics = append(resp.Topics, r)
	}
	return reply{resp: resp}
}
