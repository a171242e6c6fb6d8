package kafka

// CreatePartitions (key 37), versions 0-3.
//
// Version notes: partition counts only grow; a smaller or equal count is
// INVALID_PARTITIONS. Manual assignments are accepted and ignored (one
// node).

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleCreatePartitions(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	s := rc.srv()
	for _, rt := range req.Topics {
		r := kmsg.NewCreatePartitionsResponseTopic()
		r.Topic = rt.Topic
		name, err := rc.changeableTopicName(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpAlter) {
			err = errTopicAuthorization
		}
		if err == nil {
			if req.ValidateOnly {
				t, terr := s.cat().Topic(name)
				switch {
				case terr != nil:
					err = terr
				case int(rt.Count) <= len(t.All):
					err = errInvalidPartitions
				}
			} else {
				_, err = s.cat().GrowWholeTopic(rc.ctx(), name, int(rt.Count))
			}
		}
		r.ErrorCode = controllerErrorCode(err)
		r.ErrorMessage = errorMessage(err)
		resp.Topics = append(resp.Topics, r)
	}
	return reply{resp: resp}
}
