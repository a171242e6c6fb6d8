package kafka

// DescribeGroups (key 15), versions 0-6.
//
// Version notes: a group with committed offsets and no members is Empty. Up
// to v5 unknown groups, and consumer-protocol (KIP-848)
// groups, are described as Dead with no error, as Kafka does; v6 answers them
// GROUP_ID_NOT_FOUND with a message ("... not found", "... is not a classic
// group"), as Kafka 4 does. Consumer-protocol groups are described by
// ConsumerGroupDescribe (key 69). Authorized operations are not computed.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDescribeGroups(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		if !rc.allowedGroup(id, security.OpDescribe) {
			denied := kmsg.NewDescribeGroupsResponseGroup()
			denied.Group = id
			denied.ErrorCode = kerr.GroupAuthorizationFailed.Code
			denied.AuthorizedOperations = -2147483648
			resp.Groups = append(resp.Groups, denied)
			continue
		}
		be, err := rc.srv().coordinator(id)
		if err != nil {
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.Group = id
			g.ErrorCode = errorCode(err)
			g.AuthorizedOperations = -2147483648
			resp.Groups = append(resp.Groups, g)
			continue
		}
		d := be.groups.Describe(id)
		if d.State == groups.Dead && d.Type == "" && len(be.broker.GroupQueueOffsets(id)) > 0 {
			d.State = groups.Empty // a group known only by its committed offsets, as ListGroups shows it
		}
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = id
		g.State = string(d.State)
		g.ProtocolType = d.ProtocolType
		g.Protocol = d.Protocol
		g.AuthorizedOperations = -2147483648
		if d.State == groups.Dead && req.Version >= 6 {
			g.ErrorCode = kerr.GroupIDNotFound.Code
			g.ErrorMessage = strp(fmt.Sprintf("Group %s not found.", id))
			if d.Type == "consumer" {
				g.ErrorMessage = strp(fmt.Sprintf("Group %s is not a classic group.", id))
			}
		}
		for _, m := range d.Members {
			dm := kmsg.NewDescribeGroupsResponseGroupMember()
			dm.MemberID, dm.ClientID, dm.ClientHost = m.MemberID, m.ClientID, m.ClientHost
			dm.ProtocolMetadata, dm.MemberAssignment = m.Metadata, m.Assignment
			if m.InstanceID != "" {
				dm.InstanceID = strp(m.InstanceID)
			}
			g.Members = append(g.Members, dm)
		}
		resp.Groups = append(resp.Groups, g)
	}
	return reply{resp: resp}
}
