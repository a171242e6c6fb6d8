package kafka

// DeleteGroups (key 42), versions 0-2.
//
// Version notes: a group with members gets NON_EMPTY_GROUP; deleting removes
// its committed offsets (a share group's places in its partitions too). An
// unknown group gets GROUP_ID_NOT_FOUND.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDeleteGroups(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	s := rc.srv()
	for _, id := range req.Groups {
		r := kmsg.NewDeleteGroupsResponseGroup()
		r.Group = id
		be, cerr := s.coordinator(id)
		switch {
		case !rc.allowedGroup(id, security.OpDelete):
			r.ErrorCode = kerr.GroupAuthorizationFailed.Code
		case cerr != nil:
			r.ErrorCode = errorCode(cerr)
		case len(be.broker.GroupQueueOffsets(id)) == 0 && be.groups.Describe(id).State == groups.Dead && !isShare(be, id):
			r.ErrorCode = kerr.GroupIDNotFound.Code
		default:
			share := isShare(be, id)
			err := be.groups.Delete(id)
			if err == nil {
				err = be.groups.AwaitDurable(rc.ctx(), id)
			}
			if err == nil && share {
				err = s.forgetShareStates(rc.ctx(), id)
			}
			if err == nil {
				err = be.broker.DeleteGroupOffsets(rc.ctx(), id)
			}
			r.ErrorCode = errorCode(err)
		}
		resp.Groups = append(resp.Groups, r)
	}
	return reply{resp: resp}
}

// isShare reports whether id is a share group of be's coordinator.
func isShare(be *backend, id string) bool {
	share, _ := be.groups.IsShareGroup(id)
	return share
}
