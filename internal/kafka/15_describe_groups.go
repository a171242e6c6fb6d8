package kafka

// DescribeGroups (key 15), versions 0-5.
//
// Version notes: unknown groups are described as Dead with no error, as
// Kafka does; so are consumer-protocol (KIP-848) groups, which Kafka describes
// only through ConsumerGroupDescribe (key 69). Authorized operations are not computed.

import "github.com/twmb/franz-go/pkg/kmsg"

func handleDescribeGroups(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		d := rc.srv().groups.Describe(id)
		g := kmsg.DescribeGroupsResponseGroup{Group: id, State: string(d.State), ProtocolType: d.ProtocolType,
			Protocol: d.Protocol, AuthorizedOperations: -2147483648}
		for _, m := range d.Members {
			dm := kmsg.DescribeGroupsResponseGroupMember{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost,
				ProtocolMetadata: m.Metadata, MemberAssignment: m.Assignment}
			if m.InstanceID != "" {
				dm.InstanceID = strp(m.InstanceID)
			}
			g.Members = append(g.Members, dm)
		}
		resp.Groups = append(resp.Groups, g)
	}
	return reply{resp: resp}
}
