package kafka

// DeleteGroups (key 42), versions 0-2.
//
// Version notes: a group with members gets NON_EMPTY_GROUP; deleting removes
// its committed offsets. An unknown group gets GROUP_ID_NOT_FOUND.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDeleteGroups(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	s := rc.srv()
	known := map[string]bool{}
	for _, g := range s.broker.OffsetGroups() {
		known[g] = true
	}
	for _, d := range s.groups.List() {
		known[d.Group] = true
	}
	for _, id := range req.Groups {
		r := kmsg.NewDeleteGroupsResponseGroup()
		r.Group = id
		switch {
		case !rc.allowedGroup(id, security.OpDelete):
			r.ErrorCode = kerr.GroupAuthorizationFailed.Code
		case !known[id]:
			r.ErrorCode = kerr.GroupIDNotFound.Code
		default:
			err := s.groups.Delete(id)
			if err == nil {
				err = s.broker.DeleteGroupOffsets(rc.ctx(), id)
			}
			r.ErrorCode = errorCode(err)
		}
		resp.Groups = append(resp.Groups, r)
	}
	return reply{resp: resp}
}
